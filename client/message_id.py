"""``MessageId`` as the official ``pulsar`` package shows it to applications.

The wire-level id is ``protocol.ids.MessageId`` (a frozen dataclass with attributes); the
official API has accessor *methods* (``ledger_id()``, ``entry_id()``, ...), a constructor taking
``partition`` first, and ``serialize()`` bytes that applications store next to their state to
resume from. This class wraps the protocol id so the application-facing names match, and keeps
the one field the protocol id leaves out: ``batch_size``, which the C++ client writes into the
serialized bytes of every message id that came out of a batch.

``serialize()`` is byte-for-byte what C++ ``MessageId::serialize`` produces: a
``MessageIdData`` with ``ledgerId``/``entryId`` (``-1`` as ``2**64-1``), ``partition`` and
``batch_index`` only when not ``-1``, ``batch_size`` only when not ``0``, and for a chunked
message (PIP-37) the first chunk's position in ``first_chunk_message_id`` (the id itself is the
last chunk's, as C++ ``ChunkMessageIdImpl``). Tests compare with the official package.
``deserialize()`` reads those bytes and ignores what it does not model (``ack_set``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from protocol import pb
from protocol.ids import I64_MAX, to_u64
from protocol.ids import MessageId as WireMessageId

__all__ = ["MessageId"]

_I64_MIN = -I64_MAX - 1


#: The cluster of an id made by the application (or deserialized): not known, never refused.
UNKNOWN_CLUSTER = None


def cluster_of(message_id: MessageId) -> str | None:
    """The service URL of the cluster (``Connection.cluster``) the message of this id was
    received from; ``UNKNOWN_CLUSTER`` for an id the application made."""
    return message_id._cluster


def received_in(message_id: MessageId, cluster: str | None) -> MessageId:
    """``message_id``, marked as received in ``cluster``."""
    message_id._cluster = cluster
    return message_id


class MessageId:
    """Position of a message in a topic: (ledger, entry[, batch index]) and the partition.

    Ordering compares (ledger, entry, batch index) as signed numbers, as the official client
    does; equality also compares the partition. Ids are immutable.
    """

    __slots__ = (
        "_batch_index",
        "_batch_size",
        "_cluster",
        "_entry",
        "_first_chunk",
        "_ledger",
        "_partition",
        "_topic",
    )

    earliest: ClassVar[MessageId]
    _cluster: str | None
    latest: ClassVar[MessageId]

    def __init__(
        self,
        partition: int = -1,
        ledger_id: int = -1,
        entry_id: int = -1,
        batch_index: int = -1,
        *,
        batch_size: int = 0,
        first_chunk: WireMessageId | None = None,
    ) -> None:
        # Plain fields, no validation beyond the wire's range: a producer makes one per
        # acknowledged message, so this constructor is on the hot path.
        if not (_I64_MIN <= ledger_id <= I64_MAX and _I64_MIN <= entry_id <= I64_MAX):
            raise ValueError(f"ledger and entry ids must be signed 64-bit: {ledger_id}:{entry_id}")
        self._ledger = ledger_id
        self._entry = entry_id
        self._partition = partition
        self._batch_index = batch_index
        self._batch_size = batch_size
        self._first_chunk = first_chunk
        self._topic: str | None = None
        self._cluster = UNKNOWN_CLUSTER

    @classmethod
    def from_wire(
        cls,
        wire: WireMessageId,
        *,
        batch_size: int = 0,
        first_chunk: WireMessageId | None = None,
    ) -> MessageId:
        """Wrap a protocol id (the form receipts and MESSAGE frames carry).

        ``first_chunk``: for a chunked message, where its first chunk is (``wire`` is the last).
        """
        return cls(
            wire.partition,
            wire.ledger_id,
            wire.entry_id,
            wire.batch_index,
            batch_size=batch_size,
            first_chunk=first_chunk,
        )

    @classmethod
    def of_entry(
        cls, ledger_id: int, entry_id: int, batch_index: int, batch_size: int, partition: int
    ) -> MessageId:
        """An id decoded from a MESSAGE frame (already signed 64-bit): the consumer's hot path,
        one per received message, so it skips ``__init__``'s checks and keyword handling."""
        message_id = _new_id(cls)
        message_id._ledger = ledger_id
        message_id._entry = entry_id
        message_id._partition = partition
        message_id._batch_index = batch_index
        message_id._batch_size = batch_size
        message_id._first_chunk = None
        message_id._topic = None
        message_id._cluster = UNKNOWN_CLUSTER
        return message_id

    @classmethod
    def wrap(cls, msg_id: Any) -> MessageId:
        """The official ``MessageId.wrap``: a ``MessageId`` from another client's id (any
        object with ``ledger_id()``, ``entry_id()``, ``batch_index()`` and ``partition()``,
        such as ``pulsar.MessageId``); one of ours is returned as it is.

        Raises:
            TypeError: anything else.
        """
        if isinstance(msg_id, MessageId):
            return msg_id
        try:
            return cls(
                msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index()
            )
        except AttributeError:
            raise TypeError(f"cannot wrap a {type(msg_id).__name__} as a MessageId") from None

    def position(self) -> tuple[int, int, int, int]:
        """``(ledger_id, entry_id, batch_index, batch_size)`` in one call (acks need all four)."""
        return (self._ledger, self._entry, self._batch_index, self._batch_size)

    def ledger_id(self) -> int:
        return self._ledger

    def entry_id(self) -> int:
        return self._entry

    def batch_index(self) -> int:
        return self._batch_index

    def partition(self) -> int:
        return self._partition

    def batch_size(self) -> int:
        """Messages in the batch this id points into (0 when not from a batch)."""
        return self._batch_size

    def topic_name(self) -> str | None:
        """The topic given to ``deserialize`` (multi-topic consumers need it), else None."""
        return self._topic

    def first_chunk(self) -> WireMessageId | None:
        """The first chunk's position for a chunked message, else None."""
        return self._first_chunk

    @property
    def wire(self) -> WireMessageId:
        """The protocol-level id (what SEEK, ACK and SUBSCRIBE builders take)."""
        return WireMessageId(self._ledger, self._entry, self._partition, self._batch_index)

    def serialize(self) -> bytes:
        """Bytes to store and later hand to ``deserialize`` (the official client's format)."""
        data = pb.MessageIdData(ledgerId=to_u64(self._ledger), entryId=to_u64(self._entry))
        if self._partition != -1:
            data.partition = self._partition
        if self._batch_index != -1:
            data.batch_index = self._batch_index
        if self._batch_size:
            data.batch_size = self._batch_size
        if self._first_chunk is not None:
            self._first_chunk.write_to(data.first_chunk_message_id)
        return data.SerializeToString()

    @staticmethod
    def deserialize(message_id_bytes: bytes, topic: str | None = None) -> MessageId:
        """Read bytes made by ``serialize`` (ours or the official client's).

        Raises:
            ValueError: the bytes are not a serialized message id.
        """
        data = pb.MessageIdData()
        try:
            data.ParseFromString(message_id_bytes)
        except Exception as exc:  # upb raises DecodeError
            raise ValueError(f"not a serialized message id: {exc}") from exc
        if not data.IsInitialized():
            raise ValueError("not a serialized message id: ledgerId or entryId missing")
        first_chunk = (
            WireMessageId.from_pb(data.first_chunk_message_id)
            if data.HasField("first_chunk_message_id")
            else None
        )
        message_id = MessageId.from_wire(
            WireMessageId.from_pb(data), batch_size=data.batch_size, first_chunk=first_chunk
        )
        message_id._topic = topic
        return message_id

    def _key(self) -> tuple[int, int, int]:
        return (self._ledger, self._entry, self._batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self._partition == other._partition

    def __hash__(self) -> int:
        return hash((self._ledger, self._entry, self._partition, self._batch_index))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        # The official format: (ledger,entry,partition,batch_index).
        return f"({self._ledger},{self._entry},{self._partition},{self._batch_index})"

    def __repr__(self) -> str:
        return f"MessageId{self}"


_new_id = object.__new__

MessageId.earliest = MessageId.from_wire(WireMessageId.earliest)
MessageId.latest = MessageId.from_wire(WireMessageId.latest)
