"""Error codes and exceptions of the protocol layer.

``ServerError`` mirrors ``enum ServerError`` of PulsarApi.proto value for value and name for
name (a test compares them), so a code read off the wire converts with ``ServerError(code)`` and
a code written to the wire is just the int.

Blame is kept apart as in h11: ``RemoteProtocolError`` means the peer sent bytes we cannot
accept (the only sane reaction is to close the connection), ``LocalProtocolError`` means our own
code asked for something the protocol cannot express (a bug on our side).
"""

from __future__ import annotations

from enum import IntEnum


class ServerError(IntEnum):
    """Error codes carried by ERROR, SEND_ERROR and the *_RESPONSE commands."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class ProtocolError(Exception):
    """Base class: the byte stream or a command violates the Pulsar protocol."""


class LocalProtocolError(ProtocolError):
    """We tried to build or send something the protocol does not allow (our bug)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent malformed or forbidden bytes; the connection must be closed."""
