"""``client.asyncio`` against the official ``pulsar.asyncio`` without a broker: the same public
names, the same parameters (names, order, kinds, defaults) for every public method, the same
coroutine/plain split, the same enums, and ``PulsarException`` as the official one builds it."""

from __future__ import annotations

import asyncio
import enum
import inspect
from typing import Any

import pulsar
import pulsar.asyncio
import pytest

import client
import client.asyncio
from client import Result
from client.asyncio import PulsarException

_MODULE_ONLY = {"asyncio", "functools", "pulsar", "timedelta", "Any", "Callable", "List", "Union"}
CLASSES = ("Client", "Producer", "Consumer", "Reader")


def official_public_names() -> set[str]:
    """What ``from pulsar.asyncio import X`` offers, less the modules and typing helpers it
    happens to import."""
    return {n for n in dir(pulsar.asyncio) if not n.startswith("_")} - _MODULE_ONLY


def public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member)
    }


def default_key(value: object) -> object:
    """A default as comparable across both modules: an enum member by its value (the official
    ones are C++ enums, ours Python ones, some with the official spelling as an alias; the
    names are compared by ``test_enums_have_the_official_names_and_values``)."""
    if isinstance(value, enum.Enum) or type(value).__module__ == "_pulsar":
        return ("enum", int(value))  # type: ignore[call-overload]
    return value


def parameters(function: Any) -> list[tuple[str, object, object]]:
    return [
        (p.name, p.kind, default_key(p.default))
        for p in inspect.signature(function).parameters.values()
    ]


def test_every_official_public_name_is_offered() -> None:
    ours = set(client.asyncio.__all__)
    assert official_public_names() <= ours
    for name in ours:
        assert hasattr(client.asyncio, name)


@pytest.mark.parametrize("class_name", CLASSES)
def test_every_public_method_has_the_official_parameters_and_kind(class_name: str) -> None:
    official = public_methods(getattr(pulsar.asyncio, class_name))
    ours = public_methods(getattr(client.asyncio, class_name))
    assert set(official) <= set(ours), set(official) - set(ours)
    for name, function in official.items():
        mine = ours[name]
        assert parameters(mine) == parameters(function), f"{class_name}.{name}"
        # Awaited there, awaited here; plain there, plain here.
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(function), name


def test_the_client_and_the_exception_are_built_with_the_official_arguments() -> None:
    assert parameters(client.asyncio.Client.__init__) == parameters(pulsar.asyncio.Client.__init__)
    assert parameters(client.asyncio.PulsarException.__init__) == parameters(
        pulsar.asyncio.PulsarException.__init__
    )


def test_the_asyncio_producer_batches_by_default_unlike_the_blocking_one() -> None:
    asyncio_default = inspect.signature(client.asyncio.Client.create_producer)
    blocking_default = inspect.signature(client.Client.create_producer)
    assert asyncio_default.parameters["batching_enabled"].default is True
    assert blocking_default.parameters["batching_enabled"].default is False


@pytest.mark.parametrize(
    "enum_name",
    [
        "BatchingType",
        "CompressionType",
        "ConsumerCryptoFailureAction",
        "InitialPosition",
        "PartitionsRoutingMode",
        "ProducerAccessMode",
        "RegexSubscriptionMode",
    ],
)
def test_enums_have_the_official_names_and_values(enum_name: str) -> None:
    official = getattr(pulsar.asyncio, enum_name)
    ours = getattr(client.asyncio, enum_name)
    for name, member in official.__members__.items():
        assert int(getattr(ours, name)) == int(member), (enum_name, name)


def test_pulsar_exception_reads_as_the_official_one() -> None:
    for result, message in [(Result.Timeout, None), (Result.TopicNotFound, "no such tenant")]:
        ours = PulsarException(result, message)
        theirs = pulsar.asyncio.PulsarException(getattr(pulsar.Result, result.name), message)
        assert str(ours) == str(theirs)
        assert ours.error() is result
        assert isinstance(ours, client.PulsarException)


def test_our_errors_leave_as_pulsar_exception_and_keep_their_own_class() -> None:
    from client.asyncio.errors import translated

    with pytest.raises(PulsarException) as caught, translated():
        raise client.ProducerFenced("another producer took the topic")
    assert caught.value.error() is Result.ProducerFenced
    assert isinstance(caught.value, client.ProducerFenced)  # our own catch clauses still work
    assert str(caught.value) == "43 ProducerFenced: another producer took the topic"
    assert isinstance(caught.value.__cause__, client.ProducerFenced)

    with pytest.raises(PulsarException) as timed_out, translated():
        raise TimeoutError
    assert timed_out.value.error() is Result.Timeout


async def test_wrong_argument_types_raise_value_error_as_the_official_module() -> None:
    unused = client.asyncio.Client("pulsar://127.0.0.1:1")
    with pytest.raises(ValueError):
        await unused.create_producer("t", batching_enabled=True, chunking_enabled=True)
    with pytest.raises(ValueError):
        await unused.subscribe(["a", "b"], "sub", is_pattern_topic=True)
    with pytest.raises(ValueError):
        await unused.subscribe(42, "sub")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await unused.create_reader("t", "earliest")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await unused.get_topic_partitions(42)  # type: ignore[arg-type]
    await unused.close()
    with pytest.raises(PulsarException) as twice:
        await unused.close()
    assert twice.value.error() is Result.AlreadyClosed


def test_a_client_is_made_outside_any_loop_and_shut_down_before_use() -> None:
    made = client.asyncio.Client("pulsar://127.0.0.1:1", operation_timeout_seconds=5)
    made.shutdown()  # nothing opened: nothing to close, no loop needed

    async def use() -> None:
        with pytest.raises(PulsarException) as refused:
            await made.create_producer("t")
        assert refused.value.error() is Result.AlreadyClosed
        await made.close()  # after shutdown: Ok, as the official client answers

    asyncio.run(use())
