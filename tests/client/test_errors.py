"""``client.errors``: the official names and codes, one mapping from ``ServerError``."""

from __future__ import annotations

import _pulsar
import pulsar
import pytest

from client import errors
from client.errors import PulsarException, Result, for_result, from_server_error
from protocol import ServerError

pytestmark = pytest.mark.compat


def test_result_matches_the_official_enum_name_for_name_and_value() -> None:
    official = {name: int(value) for name, value in _pulsar.Result.__members__.items()}
    ours = {member.name: member.value for member in Result}
    assert ours == official


def test_every_error_result_has_exactly_one_class_with_the_official_name() -> None:
    for result in Result:
        if result is Result.Ok:
            with pytest.raises(ValueError):
                for_result(result)
            continue
        cls = for_result(result)
        assert cls.__name__ == result.name
        assert issubclass(cls, PulsarException)
        assert hasattr(pulsar, cls.__name__), f"pulsar.{cls.__name__} does not exist"


def test_a_second_class_for_one_code_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="both claim"):

        class Again(PulsarException):  # pragma: no cover - never instantiated
            result = Result.Timeout


def test_server_errors_map_as_the_cpp_client_does() -> None:
    # lib/ClientConnection.cc getResult()
    expected = {
        ServerError.UnknownError: errors.UnknownError,
        ServerError.MetadataError: errors.BrokerMetadataError,
        ServerError.PersistenceError: errors.BrokerPersistenceError,
        ServerError.ServiceNotReady: errors.ServiceUnitNotReady,
        ServerError.TooManyRequests: errors.TooManyLookupRequestException,
        ServerError.TopicTerminatedError: errors.TopicTerminated,
        ServerError.ProducerBusy: errors.ProducerBusy,
        ServerError.ProducerFenced: errors.ProducerFenced,
        ServerError.TopicNotFound: errors.TopicNotFound,
        ServerError.NotAllowedError: errors.NotAllowedError,
        ServerError.ChecksumError: errors.ChecksumError,
        ServerError.InvalidTxnStatus: errors.InvalidTxnStatusError,
        ServerError.TransactionCoordinatorNotFound: errors.TransactionCoordinatorNotFoundError,
    }
    for code in ServerError:
        exc = from_server_error(code, "why")
        assert str(exc) == "why"
        if code in expected:
            assert type(exc) is expected[code]
        else:  # same name on both sides
            assert type(exc).__name__ == code.name
    assert type(from_server_error(999, "new")) is errors.UnknownError


def test_retriable_is_isResultRetryable() -> None:
    fatal = {
        "ConnectError", "Timeout", "AuthenticationError", "AuthorizationError", "InvalidUrl",
        "InvalidConfiguration", "IncompatibleSchema", "TopicNotFound", "TopicTerminated",
        "OperationNotSupported", "NotAllowedError", "ChecksumError", "CryptoError",
        "ConsumerAssignError", "ProducerBusy", "ConsumerBusy", "LookupError",
        "TooManyLookupRequestException", "ProducerBlockedQuotaExceededException",
        "ProducerBlockedQuotaExceededError", "AlreadyClosed",
    }  # fmt: skip
    for result in Result:
        if result is not Result.Ok:
            assert for_result(result).retriable is (result.name not in fatal), result.name
    assert errors.Disconnected.retriable  # a lost connection is retried...
    assert errors.Disconnected.result is Result.ConnectError  # ...under the official name


def test_exceptions_carry_their_result_and_a_default_message() -> None:
    exc = errors.ProducerQueueIsFull()
    assert exc.error() is Result.ProducerQueueIsFull
    assert exc.result is Result.ProducerQueueIsFull
    assert "queue" in str(exc)
    assert isinstance(errors.ClientUsedAfterFork(), errors.AlreadyClosed)
