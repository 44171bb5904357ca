"""Client exceptions, named and numbered as the official ``pulsar`` package's.

An application moving from ``import pulsar`` catches the same names here: ``Timeout``,
``ProducerFenced``, ``ProducerBusy``, ``TopicNotFound``, ``AlreadyClosed``,
``ProducerQueueIsFull``, ... all derived from ``PulsarException``. ``Result`` mirrors the
official ``pulsar.Result`` name for name and value for value (a test compares them), and every
exception class carries the ``Result`` it stands for, so a ``send_async`` callback can be given
``(result, message_id)`` exactly as the official client gives it.

Rules this module keeps (the same as ``broker/errors.py``):

1. One class per ``Result`` code. A class claiming a code another class already claims fails
   at import time, so ``for_result`` is an exact inverse. A refinement that does not declare
   ``result`` reuses its parent's code (``Disconnected`` is a ``ConnectError``).
2. ``from_server_error`` is the one place turning a wire ``ServerError`` into an exception; the
   table is the C++ client's ``getResult`` (``lib/ClientConnection.cc``).
3. ``retriable`` is the C++ client's ``isResultRetryable`` (``lib/ResultUtils.h``): a lookup or
   a producer creation that fails with a retriable error is retried with backoff until the
   operation timeout, any other error fails it at once. ``ProducerFenced`` is retriable there
   too, but the producer treats it as terminal itself, as the C++ producer does.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from protocol.errors import ServerError

__all__ = [
    "AlreadyClosed",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "ChecksumError",
    "ClientUsedAfterFork",
    "ConnectError",
    "ConsumerAssignError",
    "ConsumerBusy",
    "ConsumerNotFound",
    "ConsumerNotInitialized",
    "CryptoError",
    "CumulativeAcknowledgementNotAllowedError",
    "Disconnected",
    "ErrorGettingAuthenticationData",
    "IncompatibleSchema",
    "Interrupted",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidTxnStatusError",
    "InvalidUrl",
    "LookupError",
    "MemoryBufferIsFull",
    "MessageTooBig",
    "NotAllowedError",
    "NotConnected",
    "OperationNotSupported",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerNotInitialized",
    "ProducerQueueIsFull",
    "PulsarException",
    "ReadError",
    "Result",
    "ServiceUnitNotReady",
    "SubscriptionNotFound",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicNotFound",
    "TopicTerminated",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFound",
    "UnknownError",
    "UnsupportedVersionError",
    "for_result",
    "from_server_error",
]


class Result(IntEnum):
    """Outcome codes of the official client (``pulsar.Result``), same names and values."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45


# lib/ResultUtils.h: the results a retrying operation gives up on at once.
_FATAL_RESULTS = frozenset(
    {
        Result.ConnectError,
        Result.Timeout,
        Result.AuthenticationError,
        Result.AuthorizationError,
        Result.InvalidUrl,
        Result.InvalidConfiguration,
        Result.IncompatibleSchema,
        Result.TopicNotFound,
        Result.TopicTerminated,
        Result.OperationNotSupported,
        Result.NotAllowedError,
        Result.ChecksumError,
        Result.CryptoError,
        Result.ConsumerAssignError,
        Result.ProducerBusy,
        Result.ConsumerBusy,
        Result.LookupError,
        Result.TooManyLookupRequestException,
        Result.ProducerBlockedQuotaExceededException,
        Result.ProducerBlockedQuotaExceededError,
        Result.AlreadyClosed,
    }
)

_BY_RESULT: dict[Result, type[PulsarException]] = {}


class PulsarException(Exception):
    """Base of every error the client raises (``pulsar.PulsarException``).

    ``result`` is the official ``Result`` code, ``retriable`` whether a retrying operation
    (lookup, producer creation, reconnection) keeps trying after it. Without a message the
    first line of the class docstring is used.
    """

    result: ClassVar[Result] = Result.UnknownError
    retriable: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "result" not in cls.__dict__:
            return  # a refinement of an existing class reuses its parent's code
        existing = _BY_RESULT.get(cls.result)
        if existing is not None:
            raise TypeError(
                f"{cls.__qualname__} and {existing.__qualname__} "
                f"both claim Result.{cls.result.name}"
            )
        _BY_RESULT[cls.result] = cls
        if "retriable" not in cls.__dict__:
            cls.retriable = cls.result not in _FATAL_RESULTS

    def __init__(self, message: str = "") -> None:
        super().__init__(
            message or (type(self).__doc__ or type(self).__name__).strip().split("\n")[0]
        )

    @property
    def message(self) -> str:
        return str(self.args[0])

    def error(self) -> Result:
        """The ``Result`` code (the name ``pulsar.asyncio.PulsarException`` gives it)."""
        return self.result


class UnknownError(PulsarException):
    """Unknown error."""

    result = Result.UnknownError


class InvalidConfiguration(PulsarException):
    """Invalid configuration."""

    result = Result.InvalidConfiguration


class Timeout(PulsarException):
    """Operation timed out."""

    result = Result.Timeout


class LookupError(PulsarException):  # shadows the builtin, as the official name does
    """Broker lookup failed."""

    result = Result.LookupError


class ConnectError(PulsarException):
    """Failed to connect to the broker."""

    result = Result.ConnectError


class Disconnected(ConnectError):
    """The connection to the broker is gone; the operation can be retried on a new one.

    The C++ client's internal ``ResultDisconnected``/``ResultRetryable``: a refused or lost TCP
    connection is retried with backoff (until the operation timeout for creations, forever for
    reconnections), unlike a ``ConnectError`` reported to the application.
    """

    retriable = True


class ReadError(PulsarException):
    """Failed to read from the socket."""

    result = Result.ReadError


class AuthenticationError(PulsarException):
    """Authentication failed on the broker."""

    result = Result.AuthenticationError


class AuthorizationError(PulsarException):
    """Not authorized for this operation."""

    result = Result.AuthorizationError


class ErrorGettingAuthenticationData(PulsarException):
    """Could not get the authentication data."""

    result = Result.ErrorGettingAuthenticationData


class BrokerMetadataError(PulsarException):
    """The broker failed to read or write metadata."""

    result = Result.BrokerMetadataError


class BrokerPersistenceError(PulsarException):
    """The broker failed to persist the entry."""

    result = Result.BrokerPersistenceError


class ChecksumError(PulsarException):
    """The message checksum did not match on the broker."""

    result = Result.ChecksumError


class ConsumerBusy(PulsarException):
    """The subscription already has a consumer that excludes this one."""

    result = Result.ConsumerBusy


class NotConnected(PulsarException):
    """Not connected to the broker."""

    result = Result.NotConnected


class AlreadyClosed(PulsarException):
    """The client, producer or consumer is already closed."""

    result = Result.AlreadyClosed


class ClientUsedAfterFork(AlreadyClosed):
    """This client was created in the parent process before ``os.fork()``.

    Its event loop, thread and sockets belong to the parent; create a new client in the child.
    """


class InvalidMessage(PulsarException):
    """Invalid message."""

    result = Result.InvalidMessage


class ConsumerNotInitialized(PulsarException):
    """The consumer is not initialized."""

    result = Result.ConsumerNotInitialized


class ProducerNotInitialized(PulsarException):
    """The producer is not initialized."""

    result = Result.ProducerNotInitialized


class ProducerBusy(PulsarException):
    """A producer with this name is already connected to the topic."""

    result = Result.ProducerBusy


class TooManyLookupRequestException(PulsarException):
    """Too many concurrent lookup requests."""

    result = Result.TooManyLookupRequestException


class InvalidTopicName(PulsarException):
    """Invalid topic name."""

    result = Result.InvalidTopicName


class InvalidUrl(PulsarException, ValueError):
    """Invalid service URL. Also a ``ValueError``: the official client refuses a malformed
    service URL with ``ValueError`` when the client is built."""

    result = Result.InvalidUrl


class ServiceUnitNotReady(PulsarException):
    """The broker is not ready to serve the topic; retry later."""

    result = Result.ServiceUnitNotReady


class OperationNotSupported(PulsarException):
    """Operation not supported."""

    result = Result.OperationNotSupported


class ProducerBlockedQuotaExceededError(PulsarException):
    """Producer blocked: the topic's backlog quota is exceeded."""

    result = Result.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(PulsarException):
    """Producer blocked: the topic's backlog quota is exceeded."""

    result = Result.ProducerBlockedQuotaExceededException


class ProducerQueueIsFull(PulsarException):
    """The producer's queue of pending messages is full."""

    result = Result.ProducerQueueIsFull


class MessageTooBig(PulsarException):
    """The message is larger than the broker's maximum message size."""

    result = Result.MessageTooBig


class TopicNotFound(PulsarException):
    """Topic not found."""

    result = Result.TopicNotFound


class SubscriptionNotFound(PulsarException):
    """Subscription not found."""

    result = Result.SubscriptionNotFound


class ConsumerNotFound(PulsarException):
    """Consumer not found."""

    result = Result.ConsumerNotFound


class UnsupportedVersionError(PulsarException):
    """The broker does not support this protocol version or feature."""

    result = Result.UnsupportedVersionError


class TopicTerminated(PulsarException):
    """The topic was terminated."""

    result = Result.TopicTerminated


class CryptoError(PulsarException):
    """Encryption or decryption failed."""

    result = Result.CryptoError


class IncompatibleSchema(PulsarException):
    """The schema is not compatible with the topic's schema."""

    result = Result.IncompatibleSchema


class ConsumerAssignError(PulsarException):
    """The broker could not assign the consumer."""

    result = Result.ConsumerAssignError


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    """Cumulative acknowledgement is not allowed for this subscription type."""

    result = Result.CumulativeAcknowledgementNotAllowedError


class TransactionCoordinatorNotFoundError(PulsarException):
    """Transaction coordinator not found."""

    result = Result.TransactionCoordinatorNotFoundError


class InvalidTxnStatusError(PulsarException):
    """Invalid transaction status."""

    result = Result.InvalidTxnStatusError


class NotAllowedError(PulsarException):
    """The operation is not allowed."""

    result = Result.NotAllowedError


class TransactionConflict(PulsarException):
    """Transaction conflict."""

    result = Result.TransactionConflict


class TransactionNotFound(PulsarException):
    """Transaction not found."""

    result = Result.TransactionNotFound


class ProducerFenced(PulsarException):
    """Another producer took exclusive access to the topic (PIP-68)."""

    result = Result.ProducerFenced


class MemoryBufferIsFull(PulsarException):
    """The client's memory limit for pending messages is reached."""

    result = Result.MemoryBufferIsFull


class Interrupted(PulsarException):
    """The operation was interrupted."""

    result = Result.Interrupted


# lib/ClientConnection.cc getResult(): wire code -> client result.
_FROM_SERVER_ERROR: dict[ServerError, type[PulsarException]] = {
    ServerError.UnknownError: UnknownError,
    ServerError.MetadataError: BrokerMetadataError,
    ServerError.PersistenceError: BrokerPersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    # C++ reports ResultRetryable unless the text names PulsarServerException; both retry.
    ServerError.ServiceNotReady: ServiceUnitNotReady,
    ServerError.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    ServerError.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    ServerError.ChecksumError: ChecksumError,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.SubscriptionNotFound: SubscriptionNotFound,
    ServerError.ConsumerNotFound: ConsumerNotFound,
    ServerError.TooManyRequests: TooManyLookupRequestException,
    ServerError.TopicTerminatedError: TopicTerminated,
    ServerError.ProducerBusy: ProducerBusy,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.ConsumerAssignError: ConsumerAssignError,
    ServerError.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    ServerError.InvalidTxnStatus: InvalidTxnStatusError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionConflict,
    ServerError.TransactionNotFound: TransactionNotFound,
    ServerError.ProducerFenced: ProducerFenced,
}


def from_server_error(code: int, message: str) -> PulsarException:
    """The exception for a ``ServerError`` received from the broker (unknown codes included)."""
    try:
        cls = _FROM_SERVER_ERROR[ServerError(code)]
    except ValueError:
        return UnknownError(f"unknown server error {code}: {message}")
    return cls(message)


def for_result(result: Result | int) -> type[PulsarException]:
    """The exception class of a ``Result`` code.

    Raises:
        ValueError: ``result`` is ``Ok`` or not a ``Result`` value.
    """
    cls = _BY_RESULT.get(Result(result))
    if cls is None:
        raise ValueError(f"{Result(result).name} is not an error")
    return cls
