"""Broker exceptions, each tied to the wire `ServerError` code it is reported with.

Rules this module keeps:

1. One class per `ServerError` code, declaring it in `server_error` (h2's `error_code`).
   The class hierarchy is flat: callers catch `BrokerError` or one exact class.
2. Codes are unique. The registry is filled as the classes are defined and a second class
   claiming a code fails at import time (asyncpg's exception metaclass does the same), so
   `for_code` is an exact inverse.
3. `to_wire` is the only translation to the wire. The connection calls it when building ERROR
   and SEND_ERROR; an unexpected exception becomes `UnknownError` with a one-line message and
   never a traceback (that goes to the broker log instead).

How the official C++ client (pulsar-client 3.13 / C++ 4.2.0) treats each code on PRODUCER /
SUBSCRIBE / LOOKUP replies (`lib/ResultUtils.h` `isResultRetryable`, plus ProducerFenced,
which the producer handles as terminal itself):

* fatal, creation fails at once: AuthenticationError, AuthorizationError, ConsumerBusy,
  ProducerBlockedQuotaExceeded{Error,Exception}, ChecksumError, TopicNotFound,
  TooManyRequests (mapped to TooManyLookupRequestException), TopicTerminatedError,
  ProducerBusy, IncompatibleSchema, ConsumerAssignError, NotAllowedError, ProducerFenced.
* retryable, retried with backoff until the operation timeout (30 s by default): everything
  else, notably UnknownError, MetadataError, PersistenceError, ServiceNotReady,
  SubscriptionNotFound, ConsumerNotFound and InvalidTopicName. So a transient broker problem
  must use a retryable code, and a definite "no" must use a fatal one or the client hangs for
  the whole timeout before failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from protocol.errors import ServerError

__all__ = [
    "CLIENT_FATAL_CODES",
    "REGISTRY",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerError",
    "BrokerUnknownError",
    "ChecksumError",
    "ConsumerAssignError",
    "ConsumerBusy",
    "ConsumerNotFound",
    "IncompatibleSchema",
    "InvalidMessageMetadata",
    "InvalidTopicName",
    "InvalidTxnStatus",
    "MetadataError",
    "NotAllowed",
    "PersistenceError",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ServiceNotReady",
    "SubscriptionNotFound",
    "TooManyRequests",
    "TopicDamaged",
    "TopicNotFound",
    "TopicTerminated",
    "TransactionConflict",
    "TransactionCoordinatorNotFound",
    "TransactionNotFound",
    "UnsupportedVersion",
    "client_retries",
    "for_code",
    "to_wire",
]

# Bound on the message put in an ERROR frame; the client only logs and surfaces it.
_MAX_WIRE_MESSAGE = 1024

_REGISTRY: dict[ServerError, type[BrokerError]] = {}


class BrokerError(Exception):
    """Base of every error the broker reports to a client.

    Raise a subclass with a message for the client, e.g.
    `raise ProducerBusy(f"producer {name!r} is already connected")`. Without a message the
    first line of the class docstring is sent.
    """

    server_error: ClassVar[ServerError] = ServerError.UnknownError

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "server_error" not in cls.__dict__:
            return  # a refinement of an existing class reuses its parent's code
        code = cls.server_error
        existing = _REGISTRY.get(code)
        if existing is not None:
            raise TypeError(
                f"{cls.__qualname__} and {existing.__qualname__} both claim ServerError.{code.name}"
            )
        _REGISTRY[code] = cls

    @property
    def message(self) -> str:
        """The text sent to the client."""
        if self.args and str(self.args[0]):
            return str(self.args[0])
        doc = (type(self).__doc__ or type(self).__name__).strip()
        return doc.splitlines()[0]


# --- codes the broker raises --------------------------------------------------------------


class BrokerUnknownError(BrokerError):
    """Internal broker error."""

    server_error = ServerError.UnknownError


class MetadataError(BrokerError):
    """Topic or subscription metadata could not be read or written."""

    server_error = ServerError.MetadataError


class PersistenceError(BrokerError):
    """The message could not be stored."""

    server_error = ServerError.PersistenceError


class ConsumerBusy(BrokerError):
    """The subscription already has a consumer that excludes this one."""

    server_error = ServerError.ConsumerBusy


class ServiceNotReady(BrokerError):
    """The broker is starting, stopping or the topic is being loaded; retry later."""

    server_error = ServerError.ServiceNotReady


class ChecksumError(BrokerError):
    """The message checksum does not match its contents."""

    server_error = ServerError.ChecksumError


class InvalidMessageMetadata(ChecksumError):
    """The message metadata is malformed.

    Reported with ChecksumError's code on purpose: it is the one SEND_ERROR code on which the
    official clients fail just that message (C++ ``removeCorruptMessage``) and keep the
    producer; any other code makes them reconnect and resend the same bytes until the send
    timeout. The message text names the actual problem.
    """


class UnsupportedVersion(BrokerError):
    """The client's protocol version or the requested feature is not supported."""

    server_error = ServerError.UnsupportedVersionError


class TopicNotFound(BrokerError):
    """The topic does not exist and auto-creation is disabled."""

    server_error = ServerError.TopicNotFound


class SubscriptionNotFound(BrokerError):
    """The subscription does not exist."""

    server_error = ServerError.SubscriptionNotFound


class ConsumerNotFound(BrokerError):
    """No consumer with this id on this connection."""

    server_error = ServerError.ConsumerNotFound


class TooManyRequests(BrokerError):
    """Too many concurrent requests on this connection."""

    server_error = ServerError.TooManyRequests


class TopicTerminated(BrokerError):
    """The topic was terminated and accepts no more messages."""

    server_error = ServerError.TopicTerminatedError


class ProducerBusy(BrokerError):
    """A producer with this name is already connected to the topic."""

    server_error = ServerError.ProducerBusy


class InvalidTopicName(BrokerError):
    """The topic name is not valid."""

    server_error = ServerError.InvalidTopicName


class IncompatibleSchema(BrokerError):
    """The schema is not compatible with the topic's schema."""

    server_error = ServerError.IncompatibleSchema


class NotAllowed(BrokerError):
    """The operation is not allowed."""

    server_error = ServerError.NotAllowedError


class ProducerFenced(BrokerError):
    """Another producer holds exclusive access to the topic (PIP-68)."""

    server_error = ServerError.ProducerFenced


class TopicDamaged(NotAllowed):
    """The topic's storage is damaged; it is refused until an operator repairs it.

    Reported with NotAllowedError's code on purpose. Pulsar answers a managed-ledger open
    failure with PersistenceError, but the official clients retry that code (C++
    `isResultRetryable`, Java `isRetriableError`) until their operation timeout and then report
    only `Timeout`: the reason never reaches the application. NotAllowedError is one they fail
    on at once, for lookups, producers, consumers and readers alike, and they log the message,
    which names the damaged file and offset. Retrying could not help: nothing changes until
    `magnetar repair-topic` runs. `damage` holds the details for the admin API.
    """

    def __init__(self, message: str, damage: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.damage: dict[str, object] = dict(damage or {})


# --- codes the broker does not raise today -------------------------------------------------
# Defined so that every ServerError has exactly one class and `for_code` is total; the
# client package uses it to turn any received code into an exception.


class AuthenticationError(BrokerError):
    """Authentication failed."""

    server_error = ServerError.AuthenticationError


class AuthorizationError(BrokerError):
    """Not authorized for this operation."""

    server_error = ServerError.AuthorizationError


class ProducerBlockedQuotaExceededError(BrokerError):
    """The backlog quota is exceeded; producers are blocked."""

    server_error = ServerError.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(BrokerError):
    """The backlog quota is exceeded; the producer was disconnected."""

    server_error = ServerError.ProducerBlockedQuotaExceededException


class ConsumerAssignError(BrokerError):
    """The consumer could not be assigned hash ranges."""

    server_error = ServerError.ConsumerAssignError


class TransactionCoordinatorNotFound(BrokerError):
    """Transactions are not supported."""

    server_error = ServerError.TransactionCoordinatorNotFound


class InvalidTxnStatus(BrokerError):
    """The transaction is not in a state that permits this operation."""

    server_error = ServerError.InvalidTxnStatus


class TransactionConflict(BrokerError):
    """The transaction conflicts with another one."""

    server_error = ServerError.TransactionConflict


class TransactionNotFound(BrokerError):
    """The transaction does not exist."""

    server_error = ServerError.TransactionNotFound


# --- lookups --------------------------------------------------------------------------------

REGISTRY: Mapping[ServerError, type[BrokerError]] = MappingProxyType(_REGISTRY)
"""Read-only view: wire code -> the one class that reports it."""

CLIENT_FATAL_CODES: frozenset[ServerError] = frozenset(
    {
        ServerError.AuthenticationError,
        ServerError.AuthorizationError,
        ServerError.ConsumerBusy,
        ServerError.ProducerBlockedQuotaExceededError,
        ServerError.ProducerBlockedQuotaExceededException,
        ServerError.ChecksumError,
        ServerError.TopicNotFound,
        ServerError.TooManyRequests,
        ServerError.TopicTerminatedError,
        ServerError.ProducerBusy,
        ServerError.IncompatibleSchema,
        ServerError.ConsumerAssignError,
        ServerError.NotAllowedError,
        ServerError.ProducerFenced,
    }
)
"""Codes on which the C++ client gives up at once instead of retrying (see module docstring)."""


def client_retries(code: ServerError) -> bool:
    """Whether the official client retries a PRODUCER/SUBSCRIBE/LOOKUP answered with `code`."""
    return code not in CLIENT_FATAL_CODES


def for_code(code: int) -> type[BrokerError]:
    """The exception class for a wire code; `BrokerUnknownError` for a code we do not know."""
    try:
        return _REGISTRY[ServerError(code)]
    except (ValueError, KeyError):
        return BrokerUnknownError


def to_wire(exc: BaseException) -> tuple[ServerError, str]:
    """Map any exception to the (code, message) pair of an ERROR / SEND_ERROR frame.

    A `BrokerError` keeps its code and message. Anything else is a broker bug or an
    untranslated failure: it becomes `UnknownError` (which the client retries) with the
    exception type and the first line of its text; the traceback is for the caller to log.
    Foreign exceptions are not guessed at here: code that knows what an `OSError` or a
    parse failure means translates it into a `BrokerError` where it is caught.
    """
    if isinstance(exc, BrokerError):
        return exc.server_error, _clip(exc.message)
    detail = str(exc).strip().splitlines()
    summary = f"{type(exc).__name__}: {detail[0]}" if detail else type(exc).__name__
    return ServerError.UnknownError, _clip(f"internal broker error ({summary})")


def _clip(message: str) -> str:
    if len(message) <= _MAX_WIRE_MESSAGE:
        return message
    return message[: _MAX_WIRE_MESSAGE - 3] + "..."
