"""Entry metadata: ``[metadataSize u32][MessageMetadata][payload]``, the bytes a broker stores.

The broker keeps every entry verbatim (the SEND frame after the checksum) and relays it
unchanged, so metadata is parsed only to learn a few facts (dedup sequence ids, batch size,
publish time for seek-by-time, keys for Key_Shared, delayed delivery). ``EntryMetadata`` exposes
those facts as plain Python values so domain code never touches protobuf types.

Invariant: nothing here re-serializes stored metadata; ``encode_entry`` is for producers that
build a new entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import LocalProtocolError, RemoteProtocolError

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class EntryMetadata:
    """Facts read from the ``MessageMetadata`` at the start of an entry.

    Attributes:
        producer_name: the producer that published the entry.
        sequence_id: sequence id of the entry (of its first message for a batch).
        highest_sequence_id: ``highest_sequence_id`` if the producer set it, else None.
        num_messages: messages in the entry (``num_messages_in_batch``, 1 if not a batch).
        is_batch: the metadata carries ``num_messages_in_batch`` (clients decide on that).
        publish_time: client publish time, ms since the epoch.
        partition_key: the message key, if any.
        ordering_key: the Key_Shared ordering key, if any.
        deliver_at_time: delayed-delivery time (ms since the epoch), if any.
        event_time: application event time, None when absent or 0 (0 means "unset").
        compression: ``CompressionType`` value of the payload (0 = none).
        payload_offset: index in the entry where the payload starts.
    """

    producer_name: str
    sequence_id: int
    highest_sequence_id: int | None
    num_messages: int
    is_batch: bool
    publish_time: int
    partition_key: str | None
    ordering_key: bytes | None
    deliver_at_time: int | None
    event_time: int | None
    compression: int = 0
    payload_offset: int = 0


def decode_entry(entry: bytes | memoryview) -> tuple[pb.MessageMetadata, bytes]:
    """Split an entry into its parsed ``MessageMetadata`` and its payload bytes.

    Raises:
        RemoteProtocolError: sizes do not fit, or the metadata is unparsable or incomplete.
    """
    metadata, payload_offset = _parse(entry)
    return metadata, bytes(entry[payload_offset:])


def parse_entry_metadata(entry: bytes | memoryview) -> EntryMetadata:
    """Read the metadata facts of a stored entry.

    Raises:
        RemoteProtocolError: sizes do not fit, or the metadata is unparsable or incomplete.
    """
    md, payload_offset = _parse(entry)
    is_batch = md.HasField("num_messages_in_batch")
    return EntryMetadata(
        producer_name=md.producer_name,
        sequence_id=md.sequence_id,
        highest_sequence_id=md.highest_sequence_id if md.HasField("highest_sequence_id") else None,
        num_messages=md.num_messages_in_batch if is_batch else 1,
        is_batch=is_batch,
        publish_time=md.publish_time,
        partition_key=md.partition_key if md.HasField("partition_key") else None,
        ordering_key=md.ordering_key if md.HasField("ordering_key") else None,
        deliver_at_time=md.deliver_at_time if md.HasField("deliver_at_time") else None,
        event_time=md.event_time or None,
        compression=md.compression,
        payload_offset=payload_offset,
    )


def encode_entry(metadata: pb.MessageMetadata, payload: bytes | memoryview) -> bytes:
    """Return ``[metadataSize][metadata][payload]`` for a new message or batch.

    Raises:
        LocalProtocolError: a required metadata field is missing.
    """
    try:
        header = metadata.SerializeToString()
    except Exception as exc:  # EncodeError: required field missing
        raise LocalProtocolError(f"cannot encode MessageMetadata: {exc}") from exc
    return b"".join((_U32.pack(len(header)), header, payload))


def _parse(entry: bytes | memoryview) -> tuple[pb.MessageMetadata, int]:
    if len(entry) < 4:
        raise RemoteProtocolError("entry shorter than its metadata size field")
    (size,) = _U32.unpack_from(entry, 0)
    if size > len(entry) - 4:
        raise RemoteProtocolError(f"metadata size {size} exceeds the {len(entry) - 4} bytes left")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(memoryview(entry)[4 : 4 + size])  # type: ignore[arg-type]  # upb takes any buffer
    except Exception as exc:  # upb DecodeError
        raise RemoteProtocolError(f"cannot parse MessageMetadata: {exc}") from exc
    if not metadata.IsInitialized():
        raise RemoteProtocolError(
            "MessageMetadata lacks producer_name, sequence_id or publish_time"
        )
    return metadata, 4 + size
