"""The blocking facade mirrors the asyncio client: every method it shares with it takes the same
parameters (names, kinds, defaults, annotations), give or take the official API's own additions
(``send_async``'s ``callback``, the ``message_listener`` / ``reader_listener`` options).

The long parameter lists are written once (``client.signatures``); this is what keeps the
short ones, and any method written by hand later, from drifting apart (``ordering_key`` did).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from client import AsyncClient, AsyncConsumer, AsyncProducer, AsyncReader, Client
from client.partitioned_producer import AsyncPartitionedProducer
from client.sync import Consumer, Producer, Reader, TableView
from client.table_view import AsyncTableView

# Facade members that mirror nothing of the asyncio class: what they are for.
NOT_MIRRORED = {
    (Client, "async_client"): "the AsyncClient underneath",
    (Client, "loop_thread"): "the thread the AsyncClient runs on",
    (Producer, "async_producer"): "the AsyncProducer underneath",
    (Consumer, "async_consumer"): "the AsyncConsumer underneath",
    (Consumer, "pause_message_listener"): "listeners are a blocking-client option",
    (Consumer, "resume_message_listener"): "listeners are a blocking-client option",
}
# Parameters the official blocking API adds, and where: (facade method, name) -> index.
ADDED = {
    (Producer, "send_async"): {"callback": 1},
    (Producer, "send_rows"): {"callback": -1},  # ours (bulk): completion as for send_async
    (Client, "subscribe"): {"message_listener": 4},  # the official place: after schema
    (Client, "create_reader"): {"reader_listener": 3},
}
MIRRORS: list[tuple[type, list[type]]] = [
    (Client, [AsyncClient]),
    (Producer, [AsyncProducer, AsyncPartitionedProducer]),
    (Consumer, [AsyncConsumer]),
    (Reader, [AsyncReader]),
    (TableView, [AsyncTableView]),
]


def public_methods(cls: type) -> list[str]:
    dunders = {"__len__", "__contains__"}
    return sorted(
        name
        for name, member in vars(cls).items()
        if (not name.startswith("_") or name in dunders)
        and (callable(member) or isinstance(member, property))
    )


def parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    """(name, kind, default, annotation) of every parameter after ``self``."""
    listed = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in listed]


CASES = [
    pytest.param(facade, origin, name, id=f"{facade.__name__}.{name}~{origin.__name__}")
    for facade, origins in MIRRORS
    for origin in origins
    for name in public_methods(facade)
    if (facade, name) not in NOT_MIRRORED and (origin is origins[0] or hasattr(origin, name))
]


@pytest.mark.parametrize(("facade", "origin", "name"), CASES)
def test_the_facade_takes_the_parameters_of_the_asyncio_method(
    facade: type, origin: type, name: str
) -> None:
    assert hasattr(origin, name), f"{facade.__name__}.{name} has no {origin.__name__}.{name}"
    ours, theirs = getattr(facade, name), getattr(origin, name)
    if isinstance(ours, property):
        assert isinstance(theirs, property)
        return
    expected = parameters(theirs)
    got = parameters(ours)
    for added, index in ADDED.get((facade, name), {}).items():
        position = [p[0] for p in got].index(added)
        assert position == (index if index >= 0 else len(got) + index), (added, got)
        del got[position]
    assert got == expected


def test_every_addition_is_a_keyword_capable_parameter_with_a_none_default() -> None:
    for (facade, name), added in ADDED.items():
        signature = inspect.signature(getattr(facade, name))
        for parameter in added:
            found = signature.parameters[parameter]
            # Where the official method takes it positionally, so do we; our own bulk
            # ``send_rows`` takes every option by keyword only.
            official = name != "send_rows"
            assert found.kind is (
                inspect.Parameter.POSITIONAL_OR_KEYWORD
                if official
                else inspect.Parameter.KEYWORD_ONLY
            )
            assert found.default is None


def test_the_ordering_key_takes_bytes_on_both_sides() -> None:
    for method in (
        Producer.send,
        Producer.send_async,
        AsyncProducer.send,
        AsyncProducer.send_async,
    ):
        annotation = inspect.signature(method).parameters["ordering_key"].annotation
        assert annotation == "str | bytes | None"


def test_the_official_positional_order_is_kept() -> None:
    """An application calling with positional arguments, as the official examples do."""
    assert [p[0] for p in parameters(Client.create_producer)][:4] == [
        "topic",
        "producer_name",
        "schema",
        "initial_sequence_id",
    ]
    assert [p[0] for p in parameters(Producer.send_async)][:3] == [
        "content",
        "callback",
        "properties",
    ]
    assert [p[0] for p in parameters(Client.subscribe)][:3] == [
        "topic",
        "subscription_name",
        "consumer_type",
    ]
