"""``Message``: what a consumer or reader hands to the application.

The accessors carry the official ``pulsar.Message`` names and return what it returns: an absent
partition or ordering key reads as ``""``, an absent event time as ``0``, properties as a new
``dict``. Two more than the official API, because effectively-once readers need them:
``sequence_id()`` and ``producer_name()`` (the PIP-6 identity of the message).

A message is built from the entry's ``MessageMetadata`` and, for a message inside a batch,
its ``SingleMessageMetadata`` record, whose per-message fields win over the entry's.
"""

from __future__ import annotations

from typing import Any, Protocol

from client.crypto.context import EncryptionContext
from client.message_id import UNKNOWN_CLUSTER, MessageId, received_in
from protocol import pb

__all__ = ["Message", "PayloadDecoder", "ReceivedEntry"]


class PayloadDecoder(Protocol):
    """What ``Message.value()`` needs of a schema."""

    def decode(self, data: bytes) -> Any: ...


class ReceivedEntry:
    """What every message of one received entry shares: its topic, ``MessageMetadata``,
    redelivery count, schema, position and batch size. A batch of 1000 messages builds one,
    not 1000 copies of its fields, and a message's id is made from it only when asked for.

    The metadata may come as its serialized bytes (a plain message the compiled decoder
    checked): it is parsed on first use. A consumer that only acknowledges then never pays
    for the parse, nor keeps one more object per queued message for the garbage collector
    to traverse."""

    __slots__ = (
        "_metadata",
        "batch_size",
        "cluster",
        "key",
        "partition",
        "redelivery_count",
        "schema",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        metadata: pb.MessageMetadata | bytes,
        ledger_id: int,
        entry_id: int,
        batch_size: int,
        partition: int,
        redelivery_count: int = 0,
        schema: PayloadDecoder | None = None,
        cluster: str | None = UNKNOWN_CLUSTER,
    ) -> None:
        self.topic = topic
        self._metadata = metadata
        #: ``(ledger_id, entry_id)``: the entry's key in the acknowledgement bookkeeping.
        self.key = (ledger_id, entry_id)
        self.batch_size = batch_size
        self.partition = partition
        self.redelivery_count = redelivery_count
        self.schema = schema
        #: The client's cluster generation it was received in (``Connection.cluster``).
        self.cluster = cluster

    @property
    def metadata(self) -> pb.MessageMetadata:
        metadata = self._metadata
        if metadata.__class__ is bytes:
            # Checked by the decoder that kept the bytes: this parse cannot fail. Two threads
            # may both parse; either result is the same message.
            metadata = self._metadata = pb.MessageMetadata.FromString(metadata)
        return metadata  # type: ignore[return-value]  # parsed above when it was bytes


class Message:
    """One received message.

    Built on the consumer's hot path, so it keeps the parsed ``MessageMetadata`` (shared by
    every message of an entry, in a ``ReceivedEntry``) and, inside a batch, the parsed
    ``SingleMessageMetadata``, and reads a field only when the application asks for it. The
    id of a message of a batch is made on the first ``message_id()``: acknowledging through
    ``ack_position`` never needs it.
    """

    __slots__ = ("_data", "_entry", "_index", "_message_id", "_single")

    _data: bytes
    _entry: ReceivedEntry
    _index: int
    _message_id: MessageId | None
    _single: pb.SingleMessageMetadata | None

    def __init__(
        self,
        data: bytes,
        message_id: MessageId,
        topic: str,
        metadata: pb.MessageMetadata,
        single: pb.SingleMessageMetadata | None = None,
        *,
        redelivery_count: int = 0,
        schema: PayloadDecoder | None = None,
        cluster: str | None = UNKNOWN_CLUSTER,
    ) -> None:
        self._data = data
        self._message_id = received_in(message_id, cluster)
        self._entry = ReceivedEntry(
            topic,
            metadata,
            message_id.ledger_id(),
            message_id.entry_id(),
            message_id.batch_size(),
            message_id.partition(),
            redelivery_count,
            schema,
            cluster,
        )
        self._index = message_id.batch_index()
        self._single = single

    @classmethod
    def from_entry(
        cls,
        topic: str,
        message_id: MessageId,
        metadata: pb.MessageMetadata,
        payload: bytes,
        *,
        redelivery_count: int = 0,
        schema: PayloadDecoder | None = None,
    ) -> Message:
        """A message that is a whole (non-batch) entry."""
        return cls(
            payload, message_id, topic, metadata, redelivery_count=redelivery_count, schema=schema
        )

    @classmethod
    def from_batch(
        cls,
        topic: str,
        message_id: MessageId,
        metadata: pb.MessageMetadata,
        single: pb.SingleMessageMetadata,
        payload: bytes,
        redelivery_count: int = 0,
        schema: PayloadDecoder | None = None,
    ) -> Message:
        """Message ``message_id.batch_index()`` of a batch entry (``single`` is its header)."""
        return cls(
            payload,
            message_id,
            topic,
            metadata,
            single,
            redelivery_count=redelivery_count,
            schema=schema,
        )

    @classmethod
    def of_record(
        cls, entry: ReceivedEntry, index: int, single: pb.SingleMessageMetadata, payload: bytes
    ) -> Message:
        """Message ``index`` of the batch ``entry``: the consumer's hot path, one per received
        message, so it sets five fields and makes no id."""
        message = _new_message(cls)
        message._data = payload
        message._entry = entry
        message._index = index
        message._single = single
        message._message_id = None
        return message

    @classmethod
    def of_whole_entry(cls, entry: ReceivedEntry, payload: bytes) -> Message:
        """A message that is a whole entry (not chunked): the consumer's hot path when
        messages are not batched; its id is made only when asked for."""
        message = _new_message(cls)
        message._data = payload
        message._entry = entry
        message._index = -1
        message._single = None
        message._message_id = None
        return message

    def is_chunked(self) -> bool:
        """Assembled from chunks: acknowledging it acknowledges every chunk's entry."""
        message_id = self._message_id
        return message_id is not None and message_id.first_chunk() is not None

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes without one)."""
        schema = self._entry.schema
        if schema is None:
            return self._data
        return schema.decode(self._data)

    def properties(self) -> dict[str, str]:
        fields = self._single if self._single is not None else self._entry.metadata
        return {kv.key: kv.value for kv in fields.properties}

    def partition_key(self) -> str:
        fields = self._single if self._single is not None else self._entry.metadata
        return fields.partition_key

    def ordering_key(self) -> str:
        fields = self._single if self._single is not None else self._entry.metadata
        return _text(fields.ordering_key)

    def event_timestamp(self) -> int:
        """Application event time in ms since the epoch, 0 when not set."""
        fields = self._single if self._single is not None else self._entry.metadata
        return fields.event_time

    def publish_timestamp(self) -> int:
        """Time the producer published the message, ms since the epoch."""
        return self._entry.metadata.publish_time

    def message_id(self) -> MessageId:
        message_id = self._message_id
        if message_id is None:
            entry = self._entry
            ledger_id, entry_id = entry.key
            message_id = self._message_id = received_in(
                MessageId.of_entry(
                    ledger_id, entry_id, self._index, entry.batch_size, entry.partition
                ),
                entry.cluster,
            )
        return message_id

    def ack_position(self) -> tuple[tuple[int, int], int, int, str | None]:
        """``((ledger_id, entry_id), batch_index, batch_size, cluster)`` without making the id
        (the acknowledgement of a message of a batch needs no more); index -1 and size 0 for a
        message that is a whole entry, size -1 for one reassembled from chunks (its
        ``message_id()`` knows them: ``is_chunked``); ``cluster``: where it was received
        (``ReceivedEntry.cluster``). One call tells an acknowledgement all three cases."""
        entry = self._entry
        message_id = self._message_id
        if message_id is not None and message_id.first_chunk() is not None:
            return entry.key, -1, -1, entry.cluster
        return entry.key, self._index, entry.batch_size, entry.cluster

    def redelivery_count(self) -> int:
        return self._entry.redelivery_count

    def topic_name(self) -> str:
        return self._entry.topic

    def producer_name(self) -> str:
        return self._entry.metadata.producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id for this message (its PIP-6 dedup key).

        Inside a batch: the record's own when the producer wrote one, else the entry's first
        sequence id plus the index (what the official clients assume).
        """
        single = self._single
        metadata = self._entry.metadata
        if single is None:
            return metadata.sequence_id
        if single.HasField("sequence_id"):
            return single.sequence_id
        return metadata.sequence_id + max(self._index, 0)

    def has_null_value(self) -> bool:
        """A tombstone: sent with ``None`` as content."""
        fields = self._single if self._single is not None else self._entry.metadata
        return fields.null_value

    def schema_version(self) -> bytes:
        return self._entry.metadata.schema_version

    def encryption_context(self) -> EncryptionContext | None:
        """The official ``Message.encryption_context()``: how the message was encrypted, None
        when it was not. A message handed out still encrypted (``crypto_failure_action``
        CONSUME) is a ``consumer.entries.UndecryptedMessage``, whose context says so."""
        metadata = self._entry.metadata
        if not metadata.encryption_keys:
            return None
        return EncryptionContext(metadata, False)

    def __repr__(self) -> str:
        topic = self._entry.topic
        return f"Message(id={self.message_id()}, topic={topic!r}, {len(self._data)} bytes)"


_new_message = object.__new__


def _text(key: bytes) -> str:
    # ordering_key is `bytes` in the proto; the official API hands it back as str.
    return key.decode("utf-8", errors="replace")
