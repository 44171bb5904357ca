"""Message ids as the Pulsar clients see them.

A ``MessageId`` names one message: an entry (``ledger_id``, ``entry_id``) of a topic partition,
and optionally a message inside a batch entry (``batch_index``).

Invariants (they follow the C++/Java clients, which our peers are):

* Ordering compares ``(ledger_id, entry_id, batch_index)`` as **signed** 64-bit numbers; the
  partition does not take part. Equality and hashing compare all four fields, so two ids of
  different partitions are neither equal nor ordered against each other beyond that tuple.
* On the wire ``ledgerId``/``entryId`` are ``uint64``; -1 travels as ``2**64-1``. ``to_pb`` and
  ``from_pb`` convert both ways. ``partition`` and ``batch_index`` are written only when >= 0 (a
  non-partitioned topic must leave ``partition`` out, or client-side id comparisons break).
* ``MessageId.earliest`` = (-1, -1, -1, -1) and ``MessageId.latest`` = (I64MAX, I64MAX, -1, -1)
  are the sentinels readers and seeks use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import LocalProtocolError, RemoteProtocolError

I64_MAX = (1 << 63) - 1
_U64_MASK = (1 << 64) - 1
_U64_SIGN = 1 << 63
_U64_RANGE = 1 << 64


def to_u64(value: int) -> int:
    """Return the uint64 wire form of a signed 64-bit value (-1 -> 2**64-1)."""
    return value & _U64_MASK


def from_u64(value: int) -> int:
    """Return the signed 64-bit reading of a uint64 wire value (2**64-1 -> -1)."""
    return value - _U64_RANGE if value >= _U64_SIGN else value


@dataclass(frozen=True, slots=True)
class MessageId:
    """Position of a message: entry (ledger, entry) plus partition and batch index."""

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def _order_key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, self.batch_index)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() < other._order_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() <= other._order_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() > other._order_key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() >= other._order_key()

    def write_to(self, target: pb.MessageIdData) -> None:
        """Fill ``target`` in place (cheaper than ``CopyFrom(self.to_pb())`` in builders)."""
        target.ledgerId = self.ledger_id & _U64_MASK
        target.entryId = self.entry_id & _U64_MASK
        if self.partition >= 0:
            target.partition = self.partition
        if self.batch_index >= 0:
            target.batch_index = self.batch_index

    def to_pb(self) -> pb.MessageIdData:
        """Return a new ``MessageIdData`` for this id."""
        data = pb.MessageIdData()
        self.write_to(data)
        return data

    @classmethod
    def from_pb(cls, data: pb.MessageIdData) -> MessageId:
        """Read a ``MessageIdData`` (absent partition/batch_index read as -1)."""
        return cls(
            from_u64(data.ledgerId), from_u64(data.entryId), data.partition, data.batch_index
        )

    def serialize(self) -> bytes:
        """Return the id as a serialized ``MessageIdData``.

        This is what Java's ``MessageId.toByteArray()`` and C++ ``MessageId::serialize`` produce
        (they may add fields we do not model, such as ``batch_size``, which we ignore on read).
        """
        return self.to_pb().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        """Parse bytes made by ``serialize`` (or by a Pulsar client).

        Raises:
            RemoteProtocolError: the bytes are not a complete ``MessageIdData``.
        """
        message = pb.MessageIdData()
        try:
            message.ParseFromString(data)
        except Exception as exc:  # upb raises DecodeError; be broad about parser failures
            raise RemoteProtocolError(f"cannot parse MessageIdData: {exc}") from exc
        if not message.IsInitialized():
            raise RemoteProtocolError("MessageIdData lacks ledgerId or entryId")
        return cls.from_pb(message)

    def __post_init__(self) -> None:
        # Catch ids that cannot travel on the wire at construction time, not deep in a builder.
        if not (
            -_U64_SIGN <= self.ledger_id < _U64_SIGN and -_U64_SIGN <= self.entry_id < _U64_SIGN
        ):
            raise LocalProtocolError(f"{self!r}: ledger/entry ids must be signed 64-bit values")

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"


MessageId.earliest = MessageId(-1, -1, -1, -1)
MessageId.latest = MessageId(I64_MAX, I64_MAX, -1, -1)
