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
from client.message_id import MessageId
from protocol import pb

__all__ = ["Message", "PayloadDecoder"]


class PayloadDecoder(Protocol):
    """What ``Message.value()`` needs of a schema."""

    def decode(self, data: bytes) -> Any: ...


class Message:
    """One received message.

    Built on the consumer's hot path, so it keeps the parsed ``MessageMetadata`` (shared by
    every message of an entry) and, inside a batch, the parsed ``SingleMessageMetadata``, and
    reads a field only when the application asks for it.
    """

    __slots__ = (
        "_data",
        "_message_id",
        "_metadata",
        "_redelivery_count",
        "_schema",
        "_single",
        "_topic",
    )

    _data: bytes
    _metadata: pb.MessageMetadata
    _message_id: MessageId
    _redelivery_count: int
    _schema: PayloadDecoder | None
    _single: pb.SingleMessageMetadata | None
    _topic: str

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
    ) -> None:
        self._data = data
        self._message_id = message_id
        self._topic = topic
        self._metadata = metadata
        self._single = single
        self._redelivery_count = redelivery_count
        self._schema = schema

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
        message = _new_message(cls)
        message._data = payload
        message._message_id = message_id
        message._topic = topic
        message._metadata = metadata
        message._single = single
        message._redelivery_count = redelivery_count
        message._schema = schema
        return message

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes without one)."""
        if self._schema is None:
            return self._data
        return self._schema.decode(self._data)

    def properties(self) -> dict[str, str]:
        fields = self._single if self._single is not None else self._metadata
        return {kv.key: kv.value for kv in fields.properties}

    def partition_key(self) -> str:
        fields = self._single if self._single is not None else self._metadata
        return fields.partition_key

    def ordering_key(self) -> str:
        fields = self._single if self._single is not None else self._metadata
        return _text(fields.ordering_key)

    def event_timestamp(self) -> int:
        """Application event time in ms since the epoch, 0 when not set."""
        fields = self._single if self._single is not None else self._metadata
        return fields.event_time

    def publish_timestamp(self) -> int:
        """Time the producer published the message, ms since the epoch."""
        return self._metadata.publish_time

    def message_id(self) -> MessageId:
        return self._message_id

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def topic_name(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._metadata.producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id for this message (its PIP-6 dedup key).

        Inside a batch: the record's own when the producer wrote one, else the entry's first
        sequence id plus the index (what the official clients assume).
        """
        single = self._single
        if single is None:
            return self._metadata.sequence_id
        if single.HasField("sequence_id"):
            return single.sequence_id
        return self._metadata.sequence_id + max(self._message_id.batch_index(), 0)

    def has_null_value(self) -> bool:
        """A tombstone: sent with ``None`` as content."""
        fields = self._single if self._single is not None else self._metadata
        return fields.null_value

    def schema_version(self) -> bytes:
        return self._metadata.schema_version

    def encryption_context(self) -> EncryptionContext | None:
        """The official ``Message.encryption_context()``: how the message was encrypted, None
        when it was not. A message handed out still encrypted (``crypto_failure_action``
        CONSUME) is a ``consumer.entries.UndecryptedMessage``, whose context says so."""
        if not self._metadata.encryption_keys:
            return None
        return EncryptionContext(self._metadata, False)

    def __repr__(self) -> str:
        return f"Message(id={self._message_id}, topic={self._topic!r}, {len(self._data)} bytes)"


_new_message = object.__new__


def _text(key: bytes) -> str:
    # ordering_key is `bytes` in the proto; the official API hands it back as str.
    return key.decode("utf-8", errors="replace")
