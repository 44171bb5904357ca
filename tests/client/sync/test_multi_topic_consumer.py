"""The blocking multi-topic consumer: an id it cannot route is refused to the caller, as the
official client refuses it (issue #23: ``test_acknowledge_failed`` of the official suite).

A send's id names no topic (the official one has none either), so a consumer of several topics
cannot tell which topic it acknowledges: ``acknowledge`` and ``acknowledge_cumulative`` raise
``OperationNotSupported``, ``negative_acknowledge`` does nothing. The same scenario runs with the
official client and with ours, against the same broker.
"""

from __future__ import annotations

import uuid
from types import ModuleType

import pulsar
import pytest

import client
from tests.helpers import BrokerThread, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def what_an_unroutable_id_meets(module: ModuleType, url: str) -> dict[str, str]:
    """``{call: exception class name or "ok"}`` for a multi-topic consumer handed a send's id."""
    made = new_client(url) if module is pulsar else client.Client(url)
    topic = f"persistent://public/default/multi-ack-{uuid.uuid4().hex[:10]}"
    try:
        producer = made.create_producer(topic)
        send_id = producer.send(b"hello")
        consumer = made.subscribe(
            [topic, topic + "-another"],
            "sub",
            consumer_type=module.ConsumerType.Shared,
            initial_position=module.InitialPosition.Earliest,
        )
        outcome = {}
        for call in ("acknowledge", "acknowledge_cumulative", "negative_acknowledge"):
            try:
                getattr(consumer, call)(send_id)
                outcome[call] = "ok"
            except Exception as exc:
                outcome[call] = type(exc).__name__
        # What the consumer received is still routable (its id names its topic).
        message = consumer.receive(10_000)
        consumer.acknowledge(message)
        consumer.acknowledge(message.message_id())
        outcome["received"] = message.data().decode()
        return outcome
    finally:
        if module is pulsar:
            close_client(made)
        else:
            made.close()


def test_an_id_without_a_topic_is_refused_as_the_official_refuses_it(
    running: BrokerThread,
) -> None:
    theirs = what_an_unroutable_id_meets(pulsar, running.url)
    ours = what_an_unroutable_id_meets(client, running.url)
    assert ours == theirs
    # On a Shared subscription the routing error comes before the cumulative-ack refusal.
    assert ours == {
        "acknowledge": "OperationNotSupported",
        "acknowledge_cumulative": "OperationNotSupported",
        "negative_acknowledge": "ok",
        "received": "hello",
    }


def test_a_send_id_names_no_topic(running: BrokerThread) -> None:
    with client.Client(running.url) as ours:
        producer = ours.create_producer(f"multi-ack-{uuid.uuid4().hex[:10]}")
        assert producer.send(b"x").topic_name() is None


def test_what_is_not_an_id_is_a_type_error(running: BrokerThread) -> None:
    with client.Client(running.url) as ours:
        topic = f"persistent://public/default/multi-ack-{uuid.uuid4().hex[:10]}"
        consumer = ours.subscribe([topic, topic + "-b"], "sub")
        for call in (consumer.acknowledge, consumer.acknowledge_cumulative):
            with pytest.raises(TypeError):
                call("not an id")  # type: ignore[arg-type]
