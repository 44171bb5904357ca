"""Plain ``IntEnum`` mirrors of the protocol enums that code outside ``protocol/`` needs.

Domain code (dispatchers, the PIP-68 producer state machine, the client API) must not import the
generated protobuf module, yet it needs subscription types, access modes and the like. These
enums carry the same names and values as PulsarApi.proto; a test checks them against the
descriptor so they cannot drift.
"""

from __future__ import annotations

from enum import IntEnum


class SubType(IntEnum):
    """``CommandSubscribe.SubType``."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class InitialPosition(IntEnum):
    """``CommandSubscribe.InitialPosition``: where a new subscription starts."""

    Latest = 0
    Earliest = 1


class ProducerAccessMode(IntEnum):
    """``ProducerAccessMode`` (PIP-68)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class AckType(IntEnum):
    """``CommandAck.AckType``."""

    Individual = 0
    Cumulative = 1


class AckValidationError(IntEnum):
    """``CommandAck.ValidationError``: why a client discarded a message it acknowledges."""

    UncompressedSizeCorruption = 0
    DecompressionError = 1
    ChecksumMismatch = 2
    BatchDeSerializeError = 3
    DecryptionError = 4


class CompressionType(IntEnum):
    """``CompressionType`` of a message payload (whole batch for batches)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4
    # The official ``pulsar`` package spells it ``ZLib``: an alias (not a member of its own),
    # so an application that switches its import to ``client`` keeps working.
    ZLib = 2


class KeySharedMode(IntEnum):
    """``KeySharedMode``: how a Key_Shared subscription splits the key-hash space."""

    AUTO_SPLIT = 0
    STICKY = 1
    # The official ``pulsar.KeySharedMode`` names: aliases, so ``client.KeySharedMode`` is this
    # enum and a policy built with either spelling sends the same value.
    AutoSplit = 0
    Sticky = 1


class TopicListMode(IntEnum):
    """``CommandGetTopicsOfNamespace.Mode``."""

    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2
    # The official ``pulsar`` package's ``RegexSubscriptionMode`` names for the same values:
    # aliases, so the client's ``RegexSubscriptionMode`` is this enum, not a copy of it.
    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


#: The message property that carries an idempotency key (issue #16; Magnetar's, not Pulsar's):
#: ``send(..., idempotency_key=...)`` sets it, the broker's idempotency window reads it.
IDEMPOTENCY_KEY_PROPERTY = "magnetar.idempotency-key"

#: The broker's default ``maxMessageSize`` (Java and Magnetar), as CONNECTED advertises it.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
