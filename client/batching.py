"""The entries a producer sends: one message alone, or a batch of messages (pure, sans-I/O).

An entry is ``[metadataSize u32][MessageMetadata][payload]``, the bytes the broker stores and
relays unchanged. ``encode_message`` makes the entry of one message; ``BatchBuilder`` collects
messages into one batch entry, in the manner of aiokafka's record accumulator and the C++
client's ``BatchMessageContainer``: the caller adds messages and builds when a trigger fires.

Invariants:

* **Pure.** No clocks, timers or I/O: the caller passes the time of each ``add`` and asks
  ``is_due(now)``. A batch is a function of the messages added, the limits and the moments the
  caller chose to build, so replaying the same input gives byte-identical entries and the same
  batch boundaries (the Spark sink relies on that).
* **Dedup identity.** A batch's ``sequence_id`` is its first message's and its
  ``highest_sequence_id`` its last message's, written both in the metadata and (through
  ``BuiltEntry.send``) in the SEND, so the broker's PIP-6 dedup records the right high-water
  mark. Sequence ids must therefore increase inside a batch; ``add`` refuses one that does not.
* **Same bytes as the official clients.** Per-message fields go in ``SingleMessageMetadata``
  (``protocol.batch``); the batch metadata copies the first message's keys, as the C++ client
  does (a broker routes a whole batch entry by them on Key_Shared); compression covers the
  whole batch payload and ``uncompressed_size`` is written only when a codec is set.

Not thread-safe: one producer owns one builder and calls it from its event loop.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

from protocol import commands, compression, pb
from protocol.batch import SingleMessage
from protocol.enums import CompressionType
from protocol.framing import encode_payload_command
from protocol.ids import to_u64
from protocol.metadata import encode_entry

_U32 = struct.Struct(">I")
_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})
_SingleMessageMetadata = pb.SingleMessageMetadata

DEFAULT_BATCHING_MAX_MESSAGES = 1000
DEFAULT_BATCHING_MAX_ALLOWED_SIZE_IN_BYTES = 128 * 1024
DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS = 10
"""The official Python client's defaults for the three batch triggers."""


class BatchingType(IntEnum):
    """The official ``pulsar.BatchingType``: how a batching producer groups messages.

    ``Default``: in arrival order, whatever their keys. ``KeyBased``: one batch per key (the
    ordering key, else the partition key), so a Key_Shared subscription, which routes a batch
    entry whole by its key, never hands a consumer another consumer's key
    (``client.key_based_batching``).
    """

    Default = 0
    KeyBased = 1


class OutgoingMessage(NamedTuple):
    """One message as the application sent it, numbered by its producer.

    A NamedTuple rather than a frozen dataclass: the producer makes one per send, and a frozen
    dataclass costs four times as much to construct (about 1.8 us against 0.5 us here).

    Attributes:
        payload: the (schema-encoded) bytes, before compression.
        sequence_id: the producer's sequence id for this message (PIP-6 dedup key).
        properties: application properties.
        partition_key: the message key (routing, compaction, Key_Shared).
        ordering_key: the Key_Shared ordering key; overrides ``partition_key`` for ordering.
        event_time: application event time in ms since the epoch, 0 when unset.
        deliver_at_time: delayed delivery time in ms since the epoch. Such a message is never
            batched (the broker delays whole entries), as in the official clients.
        null_value: a tombstone (``payload`` is empty and means "no value").
    """

    payload: bytes
    sequence_id: int
    properties: Mapping[str, str] = _NO_PROPERTIES
    partition_key: str | None = None
    ordering_key: bytes | None = None
    event_time: int = 0
    deliver_at_time: int | None = None
    null_value: bool = False

    def numbered(self, sequence_id: int) -> OutgoingMessage:
        """This message with ``sequence_id`` (what ``_replace`` does, at a third of its cost:
        the producer numbers every message it queues)."""
        return tuple.__new__(OutgoingMessage, (self[0], sequence_id, *self[2:]))

    @property
    def is_batchable(self) -> bool:
        """Whether the message may join a batch (a delayed one must travel alone)."""
        return self.deliver_at_time is None

    def to_single(self) -> SingleMessage:
        """This message as a ``protocol.batch`` record (what a consumer decodes)."""
        return SingleMessage(
            payload=self.payload,
            properties=self.properties,
            partition_key=self.partition_key,
            ordering_key=self.ordering_key,
            event_time=self.event_time,
            sequence_id=self.sequence_id,
            null_value=self.null_value,
        )


def _is_plain(message: OutgoingMessage) -> bool:
    """No per-message field beyond payload and sequence id: the common case, encoded from a
    template (``SendEncoder``, ``BatchBuilder``)."""
    return (
        not message.properties
        and message.partition_key is None
        and message.ordering_key is None
        and not message.event_time
        and message.deliver_at_time is None
        and not message.null_value
    )


def _record_header(message: OutgoingMessage) -> bytes:
    """The serialized ``SingleMessageMetadata`` of ``message`` inside a batch.

    Equal to ``message.to_single().to_pb().SerializeToString()`` (a test holds them equal),
    built directly because that path costs about 5 us per message, most of a batch's cost.
    """
    return single_metadata(message).SerializeToString()


def single_metadata(message: OutgoingMessage) -> pb.SingleMessageMetadata:
    """The ``SingleMessageMetadata`` of ``message`` (its per-message fields)."""
    header = _SingleMessageMetadata(
        payload_size=len(message.payload), sequence_id=message.sequence_id
    )
    if message.properties:
        for key, value in message.properties.items():
            header.properties.add(key=key, value=value)
    if message.partition_key is not None:
        header.partition_key = message.partition_key
    if message.ordering_key is not None:
        header.ordering_key = message.ordering_key
    if message.event_time:
        header.event_time = message.event_time
    if message.null_value:
        header.null_value = True
    return header


@dataclass(frozen=True, slots=True)
class BuiltEntry:
    """An entry ready for a SEND, with the values the SEND and the pending queue need.

    Attributes:
        entry: ``[metadataSize][MessageMetadata][payload]`` (payload compressed).
        sequence_id: sequence id of the first message (the SEND's ``sequence_id``).
        highest_sequence_id: sequence id of the last message.
        num_messages: messages in the entry (the SEND's ``num_messages``).
        is_batch: the metadata carries ``num_messages_in_batch``.
        uncompressed_size: payload bytes before compression.
    """

    entry: bytes
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    is_batch: bool
    uncompressed_size: int

    def send(self, producer_id: int) -> bytes:
        """The SEND frame for this entry (checksummed), as the producer writes it."""
        if not self.is_batch:
            return commands.send(producer_id, self.sequence_id, self.entry)
        return commands.send(
            producer_id,
            self.sequence_id,
            self.entry,
            num_messages=self.num_messages,
            highest_sequence_id=self.highest_sequence_id,
        )


def message_metadata(
    message: OutgoingMessage,
    *,
    producer_name: str,
    publish_time: int,
    schema_version: bytes | None = None,
) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of a message sent alone (not batched), before compression.

    ``chunking.split_into_chunks`` starts from this too, once ``compress_payload`` has filled
    in the codec fields.
    """
    metadata = pb.MessageMetadata(
        producer_name=producer_name, sequence_id=message.sequence_id, publish_time=publish_time
    )
    for key, value in message.properties.items():
        metadata.properties.add(key=key, value=value)
    if message.partition_key is not None:
        metadata.partition_key = message.partition_key
    if message.ordering_key is not None:
        metadata.ordering_key = message.ordering_key
    if message.event_time:
        metadata.event_time = message.event_time
    if message.deliver_at_time is not None:
        metadata.deliver_at_time = message.deliver_at_time
    if message.null_value:
        metadata.null_value = True
    if schema_version is not None:
        metadata.schema_version = schema_version
    return metadata


class SendEncoder:
    """The SEND frames of one producer, encoded from protobuf objects it keeps filled in.

    Building a ``BaseCommand`` and a ``MessageMetadata`` afresh for every message costs about
    3.5 us, most of an unbatched send's encoding. Refilling the fields that change (sequence id,
    publish time, batch counts) in objects made once per producer costs about a third of that
    and gives the same bytes as ``encode_message`` + ``BuiltEntry.send`` (a test holds them
    equal). A message with properties, keys, an event time, a delivery time or a null value
    takes the general path.

    One instance per producer, used from its event loop only: the templates are mutated.
    """

    __slots__ = ("_batch_command", "_codec", "_command", "_metadata", "_producer_name", "_schema")

    def __init__(
        self,
        producer_id: int,
        *,
        producer_name: str,
        codec: CompressionType | int = CompressionType.NONE,
        schema_version: bytes | None = None,
    ) -> None:
        self._producer_name = producer_name
        self._codec = codec
        self._schema = schema_version
        self._command = _send_template(producer_id)
        self._batch_command = _send_template(producer_id)
        self._batch_command.send.num_messages = 1
        self._batch_command.send.highest_sequence_id = 0
        metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=0, publish_time=0)
        if schema_version is not None:
            metadata.schema_version = schema_version
        if codec != CompressionType.NONE:
            metadata.compression = codec  # type: ignore[assignment]  # pb enums are ints
            metadata.uncompressed_size = 0
        self._metadata = metadata

    def entry(self, message: OutgoingMessage, publish_time: int) -> bytes:
        """``encode_message(message, ...).entry`` for this producer."""
        if not _is_plain(message):
            metadata = message_metadata(
                message,
                producer_name=self._producer_name,
                publish_time=publish_time,
                schema_version=self._schema,
            )
            return encode_entry(metadata, compress_payload(metadata, message.payload, self._codec))
        metadata = self._metadata
        metadata.sequence_id = message.sequence_id
        metadata.publish_time = publish_time
        payload = message.payload
        if self._codec != CompressionType.NONE:
            metadata.uncompressed_size = len(payload)
            payload = compression.encode(self._codec, payload)
        header = metadata.SerializeToString()
        return b"".join((_U32.pack(len(header)), header, payload))

    def send(self, sequence_id: int, entry: bytes) -> bytes:
        """``commands.send(producer_id, sequence_id, entry)``: one message's SEND."""
        self._command.send.sequence_id = sequence_id & commands.U64_MASK
        return encode_payload_command(self._command, entry)

    def batch_send(self, built: BuiltEntry) -> bytes:
        """``built.send(producer_id)`` for a batch entry."""
        send = self._batch_command.send
        send.sequence_id = built.sequence_id & commands.U64_MASK
        send.num_messages = built.num_messages
        send.highest_sequence_id = to_u64(built.highest_sequence_id)
        return encode_payload_command(self._batch_command, built.entry)


def _send_template(producer_id: int) -> pb.BaseCommand:
    command = pb.BaseCommand(type=pb.BaseCommand.SEND)
    command.send.producer_id = producer_id & commands.U64_MASK
    command.send.sequence_id = 0
    return command


def compress_payload(
    metadata: pb.MessageMetadata, payload: bytes, codec: CompressionType | int
) -> bytes:
    """Compress ``payload`` and record the codec and the original size in ``metadata``.

    As in the C++ client, nothing is recorded for ``NONE``.
    """
    if codec == CompressionType.NONE:
        return payload
    metadata.compression = codec  # type: ignore[assignment]  # pb enums are ints at runtime
    metadata.uncompressed_size = len(payload)
    return compression.encode(codec, payload)


def encode_message(
    message: OutgoingMessage,
    *,
    producer_name: str,
    publish_time: int,
    codec: CompressionType | int = CompressionType.NONE,
    schema_version: bytes | None = None,
) -> BuiltEntry:
    """The entry of one message sent alone (batching off, or a delayed message)."""
    metadata = message_metadata(
        message,
        producer_name=producer_name,
        publish_time=publish_time,
        schema_version=schema_version,
    )
    payload = compress_payload(metadata, message.payload, codec)
    return BuiltEntry(
        entry=encode_entry(metadata, payload),
        sequence_id=message.sequence_id,
        highest_sequence_id=message.sequence_id,
        num_messages=1,
        is_batch=False,
        uncompressed_size=len(message.payload),
    )


class BatchBuilder:
    """Collects messages into one batch entry; the caller builds it when a trigger fires.

    Triggers (the official client's three):

    * count: ``is_full`` once ``max_messages`` messages were added;
    * size: ``is_full`` once the batch payload reaches ``max_bytes``; ``add`` returns False
      for a message that would push a non-empty batch past ``max_bytes`` (build, then add it
      to the next batch). A message larger than ``max_bytes`` therefore travels alone, in a
      batch of one. Sizes count the encoded records (header + payload), so ``max_bytes``
      bounds the real uncompressed batch payload, where the official clients count payloads
      only;
    * delay: ``is_due(now)`` once ``max_publish_delay_ms`` passed since the first ``add``.

    The usual loop::

        if not builder.add(message, now):
            send(builder.build(...))
            builder.add(message, now)
        if builder.is_full:
            send(builder.build(...))
    """

    __slots__ = (
        "_count",
        "_first_added_at",
        "_first_message",
        "_highest_sequence_id",
        "_plain_header",
        "_records",
        "_size",
        "max_bytes",
        "max_messages",
        "max_publish_delay_ms",
    )

    def __init__(
        self,
        *,
        max_messages: int = DEFAULT_BATCHING_MAX_MESSAGES,
        max_bytes: int = DEFAULT_BATCHING_MAX_ALLOWED_SIZE_IN_BYTES,
        max_publish_delay_ms: int = DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS,
    ) -> None:
        if max_messages < 1 or max_bytes < 1 or max_publish_delay_ms < 0:
            raise ValueError(
                "batch limits must be positive (max_messages, max_bytes) "
                "and the publish delay not negative"
            )
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_publish_delay_ms = max_publish_delay_ms
        self._records: list[bytes] = []
        self._count = 0
        self._size = 0
        self._first_message: OutgoingMessage | None = None
        self._first_added_at = 0
        self._highest_sequence_id = -1
        # Refilled for every plain message: a third of the cost of a new SingleMessageMetadata.
        self._plain_header = _SingleMessageMetadata(payload_size=0, sequence_id=0)

    def __len__(self) -> int:
        """Messages in the batch being built."""
        return self._count

    @property
    def size(self) -> int:
        """Bytes of the uncompressed batch payload so far."""
        return self._size

    @property
    def is_full(self) -> bool:
        """The count or size trigger fired: build now."""
        return self._count >= self.max_messages or self._size >= self.max_bytes

    @property
    def deadline(self) -> int | None:
        """When the delay trigger fires (ms, the caller's clock), None while empty."""
        if self._first_message is None:
            return None
        return self._first_added_at + self.max_publish_delay_ms

    def is_due(self, now: int) -> bool:
        """The delay trigger fired: the oldest message has waited long enough."""
        deadline = self.deadline
        return deadline is not None and now >= deadline

    def add(self, message: OutgoingMessage, now: int) -> bool:
        """Append ``message`` (added at ``now``, ms); False if it does not fit this batch.

        A False return leaves the batch unchanged: build it, then add the message again (an
        empty batch always accepts a message).

        Raises:
            ValueError: the message is delayed (send it with ``encode_message``), or its
                sequence id does not exceed the previous one in the batch.
        """
        if message.deliver_at_time is not None:
            raise ValueError("a message with deliver_at_time is sent alone, never batched")
        first = self._first_message
        sequence_id = message.sequence_id
        if first is not None and sequence_id <= self._highest_sequence_id:
            raise ValueError(
                f"sequence id {sequence_id} does not follow "
                f"{self._highest_sequence_id} in the batch"
            )
        payload = message.payload
        if _is_plain(message):  # _record_header's bytes, from this builder's template
            template = self._plain_header
            template.payload_size = len(payload)
            template.sequence_id = sequence_id
            header = template.SerializeToString()
        else:
            header = _record_header(message)
        record_size = 4 + len(header) + len(payload)
        if first is None:
            self._first_message = message
            self._first_added_at = now
        elif self._count >= self.max_messages or self._size + record_size > self.max_bytes:
            return False
        records = self._records
        records.append(_U32.pack(len(header)) + header)
        records.append(payload)
        self._count += 1
        self._size += record_size
        self._highest_sequence_id = sequence_id
        return True

    def build(
        self,
        *,
        producer_name: str,
        codec: CompressionType | int = CompressionType.NONE,
        schema_version: bytes | None = None,
        publish_time: int | None = None,
        identify_by_highest: bool = False,
    ) -> BuiltEntry:
        """Encode the batch entry and empty the builder.

        Args:
            producer_name: the name the broker confirmed for the producer.
            codec: compression applied to the whole batch payload.
            schema_version: from PRODUCER_SUCCESS, stamped on the entry if given.
            publish_time: ms since the epoch; defaults to the time of the first ``add``
                (the official clients use the first message's publish time).
            identify_by_highest: the entry's (and SEND's) sequence id is its *highest* one,
                not its first: key-based batches interleave ids (key A: 0, 3; key B: 1, 2),
                and only their highest ids are in order across batches, which PIP-6 dedup
                needs (the Java client's ``BatchMessageKeyBasedContainer`` does the same).

        Raises:
            ValueError: the batch is empty.
        """
        first = self._first_message
        if first is None:
            raise ValueError("cannot build an empty batch")
        sequence_id = self._highest_sequence_id if identify_by_highest else first.sequence_id
        metadata = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=sequence_id,
            publish_time=self._first_added_at if publish_time is None else publish_time,
            num_messages_in_batch=self._count,
            highest_sequence_id=self._highest_sequence_id,
        )
        if first.partition_key is not None:
            metadata.partition_key = first.partition_key
        if first.ordering_key is not None:
            metadata.ordering_key = first.ordering_key
        if schema_version is not None:
            metadata.schema_version = schema_version
        payload = compress_payload(metadata, b"".join(self._records), codec)
        built = BuiltEntry(
            entry=encode_entry(metadata, payload),
            sequence_id=sequence_id,
            highest_sequence_id=self._highest_sequence_id,
            num_messages=self._count,
            is_batch=True,
            uncompressed_size=self._size,
        )
        self._clear()
        return built

    def _clear(self) -> None:
        self._records = []
        self._count = 0
        self._size = 0
        self._first_message = None
        self._first_added_at = 0
        self._highest_sequence_id = -1
