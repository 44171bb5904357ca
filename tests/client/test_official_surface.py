"""Our client as a drop-in for the official one (issue #23): its names, its positional orders,
and what wrong arguments raise, compared with the installed official ``pulsar-client``.

Only official names are imported from ``client``, as a user porting from ``pulsar`` would.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

import client
from client import Client, Consumer, MessageId, Producer, Reader
from tests.helpers import BrokerThread

# Public names of the official module that are no part of its API: typing helpers and modules
# it imports for itself.
_NOT_API = {"Callable", "List", "Optional", "Tuple", "Union", "logging", "re", "timedelta"}

# Official names we have no counterpart for yet, each with the issue that would bring it.
_NOT_YET = {
    # Pulsar Functions (the ``functions`` runtime's classes): not part of a client.
    "Context",
    "Function",
    "IdentitySerDe",
    "PickleSerDe",
    "SerDe",
    "functions",
    # The C++ core's logging hooks (``Client(logger=...)`` is accepted and ignored; we log
    # through ``logging``): no logger classes yet.
    "ConsoleLogger",
    "FileLogger",
    "LoggerLevel",
    # The C++ batch parser and dead-letter builder, internals the official exposes.
    "MessageBatch",
    "DeadLetterPolicyBuilder",
    # Key_Shared's policy types belong to the Key_Shared work of issue #23 (client/key_shared.py).
    "ConsumerKeySharedPolicy",
    "KeySharedMode",
    "KeySharedPolicy",
    # Modules: ``client.errors`` is ``pulsar.exceptions``, ``client.sync.TableView`` the table
    # view (exported as ``TableView``).
    "exceptions",
    "tableview",
}


def official_names() -> list[str]:
    return sorted(
        name
        for name in dir(pulsar)
        if not name.startswith("_") and name not in _NOT_API and name not in _NOT_YET
    )


@pytest.mark.parametrize("name", official_names())
def test_every_official_public_name_exists(name: str) -> None:
    assert hasattr(client, name), f"client has no {name} (pulsar.{name})"


def test_the_names_left_out_are_still_official() -> None:
    """The list of names we lack shrinks as they come: a name the official drops, or one we
    gained, must leave it."""
    for name in _NOT_YET:
        assert hasattr(pulsar, name), name
        assert not hasattr(client, name) or name in {"ConsumerKeySharedPolicy", "KeySharedMode"}


def test_consumer_type_has_both_spellings_of_key_shared() -> None:
    assert client.ConsumerType.KeyShared is client.ConsumerType.Key_Shared  # type: ignore[comparison-overlap]
    assert list(client.ConsumerType.__members__)[:3] == list(pulsar.ConsumerType.__members__)[:3]
    assert int(client.ConsumerType.KeyShared) == int(pulsar.ConsumerType.KeyShared)


def names(function: Callable[..., Any]) -> list[str]:
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]


SIGNATURES = [
    (pulsar.Client.__init__, Client.__init__),
    (pulsar.Client.create_producer, Client.create_producer),
    (pulsar.Client.subscribe, Client.subscribe),
    (pulsar.Client.create_reader, Client.create_reader),
    (pulsar.Client.create_table_view, Client.create_table_view),
    (pulsar.Client.get_topic_partitions, Client.get_topic_partitions),
    (pulsar.Client.shutdown, Client.shutdown),
    (pulsar.Client.close, Client.close),
    (pulsar.Producer.send, Producer.send),
    (pulsar.Producer.send_async, Producer.send_async),
    (pulsar.Consumer.receive, Consumer.receive),
    (pulsar.Consumer.acknowledge, Consumer.acknowledge),
    (pulsar.Consumer.acknowledge_cumulative, Consumer.acknowledge_cumulative),
    (pulsar.Consumer.negative_acknowledge, Consumer.negative_acknowledge),
    (pulsar.Consumer.seek, Consumer.seek),
    (pulsar.Consumer.consumer_name, Consumer.consumer_name),
    (pulsar.Consumer.is_connected, Consumer.is_connected),
    (pulsar.Reader.read_next, Reader.read_next),
    (pulsar.Reader.seek, Reader.seek),
    (pulsar.Reader.is_connected, Reader.is_connected),
    (pulsar.MessageId.__init__, MessageId.__init__),
]


@pytest.mark.parametrize(
    ("official", "ours"), SIGNATURES, ids=[o.__qualname__ for o, _ in SIGNATURES]
)
def test_positional_parameters_are_the_official_ones_in_its_order(
    official: Callable[..., Any], ours: Callable[..., Any]
) -> None:
    """An application calling with positional arguments gets the same meaning; ours may add
    parameters only after the official ones (or keyword-only)."""
    theirs = names(official)
    assert names(ours)[: len(theirs)] == theirs


# --- argument errors: what the official raises, before any I/O ---------------------------


@pytest.fixture(scope="module")
def clients(running: BrokerThread) -> Iterator[tuple[pulsar.Client, Client]]:
    official = pulsar.Client(running.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    ours = Client(running.url)
    try:
        yield official, ours
    finally:
        ours.close()
        official.close()


def new_topic() -> str:
    return f"persistent://public/default/surface-{uuid.uuid4().hex[:10]}"


CLIENT_CALLS: list[tuple[str, Callable[[Any, str], Any]]] = [
    ("subscribe-without-subscription", lambda c, t: c.subscribe(t, None)),
    ("subscribe-to-a-number", lambda c, t: c.subscribe(42, "sub")),
    ("subscribe-bad-queue-size", lambda c, t: c.subscribe(t, "s", receiver_queue_size="9")),
    ("subscribe-bad-properties", lambda c, t: c.subscribe(t, "s", properties=[("a", "b")])),
    ("subscribe-bad-inclusive", lambda c, t: c.subscribe(t, "s", start_message_id_inclusive=1)),
    ("subscribe-bad-batch-policy", lambda c, t: c.subscribe(t, "s", batch_receive_policy=3)),
    ("producer-on-a-number", lambda c, t: c.create_producer(1)),
    ("producer-bad-name", lambda c, t: c.create_producer(t, producer_name=3)),
    ("producer-bad-flag", lambda c, t: c.create_producer(t, batching_enabled="yes")),
    (
        "producer-batching-and-chunking",
        lambda c, t: c.create_producer(t, batching_enabled=True, chunking_enabled=True),
    ),
    ("reader-without-start", lambda c, t: c.create_reader(t, None)),
    ("reader-bad-name", lambda c, t: c.create_reader(t, _earliest(c), reader_name=5)),
]


def _earliest(c: Any) -> Any:
    return pulsar.MessageId.earliest if isinstance(c, pulsar.Client) else MessageId.earliest


@pytest.mark.parametrize(("case", "call"), CLIENT_CALLS, ids=[case for case, _ in CLIENT_CALLS])
def test_bad_arguments_raise_what_the_official_raises(
    clients: tuple[pulsar.Client, Client], case: str, call: Callable[[Any, str], Any]
) -> None:
    official, ours = clients
    topic = new_topic()
    with pytest.raises(Exception) as theirs:
        call(official, topic)
    started = time.monotonic()
    with pytest.raises(type(theirs.value)) as raised:
        call(ours, topic)
    # Refused before any I/O: not after the operation timeout (subscribe(topic, None) hung).
    assert time.monotonic() - started < 5
    assert type(raised.value) in (ValueError, TypeError)


@pytest.mark.parametrize(
    "arguments",
    [
        {"service_url": 3},
        {"authentication": "token"},
        {"operation_timeout_seconds": "30"},
        {"connection_timeout_ms": "10"},
        {"use_tls": "no"},
        {"io_threads": "1"},
        {"listener_name": 5},
    ],
)
def test_the_client_checks_its_arguments_as_the_official(
    running: BrokerThread, arguments: dict[str, Any]
) -> None:
    arguments = {"service_url": running.url, **arguments}
    with pytest.raises(ValueError):
        pulsar.Client(**arguments)
    with pytest.raises(ValueError):
        Client(**arguments)


def test_the_client_takes_its_arguments_positionally_as_the_official(
    running: BrokerThread,
) -> None:
    # (service_url, authentication, operation_timeout_seconds): 7 s, not an authentication.
    with Client(running.url, None, 7) as ours:
        assert ours.async_client.config.operation_timeout == 7


def test_message_calls_raise_what_the_official_raises(
    clients: tuple[pulsar.Client, Client],
) -> None:
    official, ours = clients
    topic = new_topic()
    handles = []
    for c in (official, ours):
        producer = c.create_producer(topic)
        consumer = c.subscribe(topic, f"sub-{type(c).__module__}")
        handles.append((producer, consumer))
    calls: list[tuple[str, Callable[[Any, Any], Any]]] = [
        ("str-content", lambda p, c: p.send("text")),
        ("bad-properties", lambda p, c: p.send(b"x", properties=3)),
        ("bad-partition-key", lambda p, c: p.send(b"x", partition_key=3)),
        ("bad-timeout", lambda p, c: c.receive(timeout_millis="x")),
        ("ack-a-string", lambda p, c: c.acknowledge("x")),
        ("seek-a-string", lambda p, c: c.seek("x")),
    ]
    for case, call in calls:
        (their_producer, their_consumer), (our_producer, our_consumer) = handles
        with pytest.raises(Exception) as theirs:
            call(their_producer, their_consumer)
        with pytest.raises(type(theirs.value)):
            call(our_producer, our_consumer)
        assert type(theirs.value) in (ValueError, TypeError), case
