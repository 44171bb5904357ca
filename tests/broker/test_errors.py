"""broker.errors: one class per wire code, the reverse lookup, and the single wire mapping."""

from __future__ import annotations

import pytest

from broker import errors
from broker.errors import (
    CLIENT_FATAL_CODES,
    REGISTRY,
    BrokerError,
    BrokerUnknownError,
    ProducerBusy,
    TopicNotFound,
    client_retries,
    for_code,
    to_wire,
)
from protocol.errors import ServerError

RAISED_BY_THE_BROKER = [
    (errors.BrokerUnknownError, ServerError.UnknownError),
    (errors.MetadataError, ServerError.MetadataError),
    (errors.PersistenceError, ServerError.PersistenceError),
    (errors.ConsumerBusy, ServerError.ConsumerBusy),
    (errors.ServiceNotReady, ServerError.ServiceNotReady),
    (errors.ChecksumError, ServerError.ChecksumError),
    (errors.TopicNotFound, ServerError.TopicNotFound),
    (errors.SubscriptionNotFound, ServerError.SubscriptionNotFound),
    (errors.ConsumerNotFound, ServerError.ConsumerNotFound),
    (errors.TooManyRequests, ServerError.TooManyRequests),
    (errors.TopicTerminated, ServerError.TopicTerminatedError),
    (errors.ProducerBusy, ServerError.ProducerBusy),
    (errors.InvalidTopicName, ServerError.InvalidTopicName),
    (errors.IncompatibleSchema, ServerError.IncompatibleSchema),
    (errors.NotAllowed, ServerError.NotAllowedError),
    (errors.ProducerFenced, ServerError.ProducerFenced),
    (errors.UnsupportedVersion, ServerError.UnsupportedVersionError),
]


@pytest.mark.parametrize(("cls", "code"), RAISED_BY_THE_BROKER)
def test_class_reports_its_code(cls: type[BrokerError], code: ServerError) -> None:
    assert cls.server_error is code
    assert issubclass(cls, BrokerError)
    assert for_code(code) is cls
    assert to_wire(cls("why"))[0] is code


def test_every_code_has_exactly_one_class() -> None:
    assert set(REGISTRY) == set(ServerError)
    assert len(set(REGISTRY.values())) == len(ServerError)
    for code in ServerError:
        assert for_code(int(code)).server_error is code


def test_every_exported_class_is_registered_or_refines_a_registered_one() -> None:
    exported = [getattr(errors, name) for name in errors.__all__]
    classes = {obj for obj in exported if isinstance(obj, type) and obj is not BrokerError}
    registered = set(REGISTRY.values())
    assert registered <= classes
    for refinement in classes - registered:
        # Rule 1's exception: a more precise name reported with its parent's code.
        assert issubclass(refinement, BrokerError)
        assert "server_error" not in refinement.__dict__
        assert for_code(refinement.server_error) in refinement.__mro__


def test_a_second_class_for_a_code_fails_at_definition() -> None:
    with pytest.raises(TypeError, match="ProducerBusy"):

        class AnotherProducerBusy(BrokerError):
            server_error = ServerError.ProducerBusy

    assert for_code(ServerError.ProducerBusy) is ProducerBusy


def test_refinement_without_own_code_inherits_and_is_not_registered() -> None:
    class PartitionNotFound(TopicNotFound):
        """A partition of the topic does not exist."""

    assert PartitionNotFound.server_error is ServerError.TopicNotFound
    assert for_code(ServerError.TopicNotFound) is TopicNotFound
    assert to_wire(PartitionNotFound()) == (
        ServerError.TopicNotFound,
        "A partition of the topic does not exist.",
    )


def test_unknown_wire_code_maps_to_unknown_error() -> None:
    assert for_code(999) is BrokerUnknownError
    assert for_code(-1) is BrokerUnknownError


def test_to_wire_keeps_the_message_of_a_broker_error() -> None:
    exc = ProducerBusy("producer 'p1' is already connected to persistent://public/default/t")
    assert to_wire(exc) == (ServerError.ProducerBusy, str(exc))


def test_to_wire_without_message_uses_the_class_description() -> None:
    code, message = to_wire(errors.ServiceNotReady())
    assert code is ServerError.ServiceNotReady
    assert message == "The broker is starting, stopping or the topic is being loaded; retry later."


def test_every_class_has_a_one_line_description() -> None:
    for cls in REGISTRY.values():
        assert cls.__doc__
        assert cls().message == cls.__doc__.strip().splitlines()[0]


def test_to_wire_on_unexpected_exception_is_unknown_error_without_traceback() -> None:
    empty: dict[str, int] = {}
    try:
        empty["missing"]
    except KeyError as exc:
        code, message = to_wire(exc)
    assert code is ServerError.UnknownError
    assert message == "internal broker error (KeyError: 'missing')"


def test_to_wire_on_multiline_or_empty_exception_text() -> None:
    assert to_wire(ValueError("first line\nTraceback (most recent call last):\n  ...")) == (
        ServerError.UnknownError,
        "internal broker error (ValueError: first line)",
    )
    assert to_wire(RuntimeError()) == (
        ServerError.UnknownError,
        "internal broker error (RuntimeError)",
    )


def test_to_wire_maps_base_exceptions_too() -> None:
    code, _ = to_wire(KeyboardInterrupt())
    assert code is ServerError.UnknownError


def test_to_wire_bounds_the_message_length() -> None:
    _, message = to_wire(errors.NotAllowed("x" * 5000))
    assert len(message) == 1024
    assert message.endswith("...")


def test_client_fatal_and_retryable_codes() -> None:
    for code in (ServerError.ProducerBusy, ServerError.ProducerFenced, ServerError.TopicNotFound):
        assert not client_retries(code)
    for code in (
        ServerError.UnknownError,
        ServerError.ServiceNotReady,
        ServerError.PersistenceError,
        ServerError.MetadataError,
        ServerError.SubscriptionNotFound,
    ):
        assert client_retries(code)
    assert set(ServerError) > CLIENT_FATAL_CODES
