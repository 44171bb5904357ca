"""``Message``: what a consumer or reader hands to the application.

The accessors carry the official ``pulsar.Message`` names and return what it returns: an absent
partition or ordering key reads as ``""``, an absent event time as ``0``, properties as a new
``dict``. Two more than the official API, because effectively-once readers need them:
``sequence_id()`` and ``producer_name()`` (the PIP-6 identity of the message).

A message is built from the entry's ``MessageMetadata`` and, for a message inside a batch,
its ``SingleMessage`` record, whose per-message fields win over the entry's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from client.message_id import MessageId
from protocol import SingleMessage, pb

__all__ = ["Message", "PayloadDecoder"]


class PayloadDecoder(Protocol):
    """What ``Message.value()`` needs of a schema."""

    def decode(self, data: bytes) -> Any: ...


class Message:
    """One received message."""

    __slots__ = (
        "_data",
        "_event_timestamp",
        "_message_id",
        "_null_value",
        "_ordering_key",
        "_partition_key",
        "_producer_name",
        "_properties",
        "_publish_timestamp",
        "_redelivery_count",
        "_schema",
        "_schema_version",
        "_sequence_id",
        "_topic",
    )

    def __init__(
        self,
        data: bytes,
        message_id: MessageId,
        topic: str,
        *,
        properties: Mapping[str, str] | None = None,
        partition_key: str = "",
        ordering_key: str = "",
        event_timestamp: int = 0,
        publish_timestamp: int = 0,
        producer_name: str = "",
        sequence_id: int = -1,
        redelivery_count: int = 0,
        null_value: bool = False,
        schema_version: bytes = b"",
        schema: PayloadDecoder | None = None,
    ) -> None:
        self._data = data
        self._message_id = message_id
        self._topic = topic
        self._properties = dict(properties) if properties else {}
        self._partition_key = partition_key
        self._ordering_key = ordering_key
        self._event_timestamp = event_timestamp
        self._publish_timestamp = publish_timestamp
        self._producer_name = producer_name
        self._sequence_id = sequence_id
        self._redelivery_count = redelivery_count
        self._null_value = null_value
        self._schema_version = schema_version
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
            payload,
            message_id,
            topic,
            properties={kv.key: kv.value for kv in metadata.properties}
            if metadata.properties
            else None,
            partition_key=metadata.partition_key,
            ordering_key=_text(metadata.ordering_key),
            event_timestamp=metadata.event_time,
            publish_timestamp=metadata.publish_time,
            producer_name=metadata.producer_name,
            sequence_id=metadata.sequence_id,
            redelivery_count=redelivery_count,
            null_value=metadata.null_value,
            schema_version=metadata.schema_version,
            schema=schema,
        )

    @classmethod
    def from_batch(
        cls,
        topic: str,
        message_id: MessageId,
        metadata: pb.MessageMetadata,
        single: SingleMessage,
        *,
        redelivery_count: int = 0,
        schema: PayloadDecoder | None = None,
    ) -> Message:
        """Message ``message_id.batch_index()`` of a batch entry (``single`` is its record).

        Its sequence id is the record's own when the producer wrote one, else the entry's
        first sequence id plus the index (what the official clients assume).
        """
        sequence_id = (
            single.sequence_id
            if single.sequence_id is not None
            else metadata.sequence_id + max(message_id.batch_index(), 0)
        )
        return cls(
            single.payload,
            message_id,
            topic,
            properties=single.properties,
            partition_key=single.partition_key or "",
            ordering_key=_text(single.ordering_key or b""),
            event_timestamp=single.event_time,
            publish_timestamp=metadata.publish_time,
            producer_name=metadata.producer_name,
            sequence_id=sequence_id,
            redelivery_count=redelivery_count,
            null_value=single.null_value,
            schema_version=metadata.schema_version,
            schema=schema,
        )

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes without one)."""
        if self._schema is None:
            return self._data
        return self._schema.decode(self._data)

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._partition_key

    def ordering_key(self) -> str:
        return self._ordering_key

    def event_timestamp(self) -> int:
        """Application event time in ms since the epoch, 0 when not set."""
        return self._event_timestamp

    def publish_timestamp(self) -> int:
        """Time the producer published the message, ms since the epoch."""
        return self._publish_timestamp

    def message_id(self) -> MessageId:
        return self._message_id

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def topic_name(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id for this message (its PIP-6 dedup key)."""
        return self._sequence_id

    def has_null_value(self) -> bool:
        """A tombstone: sent with ``None`` as content."""
        return self._null_value

    def schema_version(self) -> bytes:
        return self._schema_version

    def __repr__(self) -> str:
        return f"Message(id={self._message_id}, topic={self._topic!r}, {len(self._data)} bytes)"


def _text(key: bytes) -> str:
    # ordering_key is `bytes` in the proto; the official API hands it back as str.
    return key.decode("utf-8", errors="replace")
