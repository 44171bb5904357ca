"""Batch payloads: the concatenation of ``[size u32][SingleMessageMetadata][payload]`` records.

A client batch is one entry whose ``MessageMetadata.num_messages_in_batch`` is N and whose
(uncompressed) payload holds N records. Each record's ``SingleMessageMetadata.payload_size``
says how many payload bytes follow it. The broker normally never looks inside a batch; it does
so only to learn per-message facts such as the highest sequence id.

Decoding is strict: every record must parse and the records must cover the payload exactly,
otherwise ``RemoteProtocolError`` is raised (the bytes came from a peer).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol._accel import speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import RemoteProtocolError

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a batch: its payload plus the per-message metadata fields."""

    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    ordering_key: bytes | None = None
    event_time: int = 0
    sequence_id: int | None = None
    null_value: bool = False
    null_partition_key: bool = False
    compacted_out: bool = False
    partition_key_b64_encoded: bool = False

    def to_pb(self) -> pb.SingleMessageMetadata:
        """Return the ``SingleMessageMetadata`` header of this message."""
        meta = pb.SingleMessageMetadata(payload_size=len(self.payload))
        for key, value in self.properties.items():
            meta.properties.add(key=key, value=value)
        if self.partition_key is not None:
            meta.partition_key = self.partition_key
        if self.ordering_key is not None:
            meta.ordering_key = self.ordering_key
        if self.event_time:
            meta.event_time = self.event_time
        if self.sequence_id is not None:
            meta.sequence_id = self.sequence_id
        # Flags are written only when set, as the clients do, to keep records small.
        if self.null_value:
            meta.null_value = True
        if self.null_partition_key:
            meta.null_partition_key = True
        if self.compacted_out:
            meta.compacted_out = True
        if self.partition_key_b64_encoded:
            meta.partition_key_b64_encoded = True
        return meta

    @classmethod
    def from_pb(cls, meta: pb.SingleMessageMetadata, payload: bytes) -> SingleMessage:
        """Build from a parsed header and its payload bytes."""
        return cls(
            payload=payload,
            properties={kv.key: kv.value for kv in meta.properties},
            partition_key=meta.partition_key if meta.HasField("partition_key") else None,
            ordering_key=meta.ordering_key if meta.HasField("ordering_key") else None,
            event_time=meta.event_time,
            sequence_id=meta.sequence_id if meta.HasField("sequence_id") else None,
            null_value=meta.null_value,
            null_partition_key=meta.null_partition_key,
            compacted_out=meta.compacted_out,
            partition_key_b64_encoded=meta.partition_key_b64_encoded,
        )


def encode_batch(messages: Iterable[SingleMessage]) -> bytes:
    """Return the batch payload for ``messages`` (in order)."""
    parts: list[bytes] = []
    for message in messages:
        header = message.to_pb().SerializeToString()
        parts += (_U32.pack(len(header)), header, message.payload)
    return b"".join(parts)


def decode_batch(payload: bytes | memoryview, count: int | None = None) -> list[SingleMessage]:
    """Split a batch payload into its messages.

    Args:
        payload: the uncompressed batch payload.
        count: the expected number of messages (``num_messages_in_batch``), if known.

    Raises:
        RemoteProtocolError: a record is truncated or unparsable, bytes are left over, or the
            number of records differs from ``count``.
    """
    return [SingleMessage.from_pb(meta, data) for meta, data in split_batch(payload, count)]


def py_split_batch(
    payload: bytes | memoryview, count: int | None = None
) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split a batch payload into ``(header, payload)`` records, headers left as parsed.

    The consumer's hot path: it keeps the parsed header and reads fields only when the
    application asks, instead of copying every field into a ``SingleMessage``. Same checks and
    errors as ``decode_batch``; with ``count`` given, the work is bounded by it: parsing stops
    at the first record beyond it.
    """
    data = payload if payload.__class__ is bytes else bytes(payload)
    records: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    append = records.append
    parse = _parse_single
    unpack = _U32.unpack_from
    position, end = 0, len(data)
    # One more record than declared is the most ever parsed: refused then, not after parsing
    # the rest (a payload of millions of empty records would otherwise cost seconds).
    for _ in range(_UNBOUNDED if count is None else count + 1):
        if position >= end:
            break
        if end - position < 4:
            raise RemoteProtocolError(f"truncated batch record header at offset {position}")
        (header_size,) = unpack(data, position)
        header_end = position + 4 + header_size
        if header_end > end:
            raise RemoteProtocolError(f"batch record metadata at offset {position} is truncated")
        try:
            meta = parse(data[position + 4 : header_end])
        except Exception as exc:  # upb DecodeError
            raise RemoteProtocolError(f"bad SingleMessageMetadata at offset {position}") from exc
        # payload_size is the one required field: a header that starts with its tag (field 3,
        # varint: 0x18, as every client writes it) has it; any other must be initialized.
        if (
            header_size == 0 or data[position + 4] != _PAYLOAD_SIZE_TAG
        ) and not meta.IsInitialized():
            raise RemoteProtocolError(f"batch record at offset {position} lacks a payload size")
        payload_end = header_end + meta.payload_size
        if payload_end > end or payload_end < header_end:
            raise RemoteProtocolError(f"batch record payload at offset {position} is truncated")
        append((meta, data[header_end:payload_end]))
        position = payload_end
    else:
        if position < end:
            raise RemoteProtocolError(f"batch holds more than the {count} messages it declares")
    if count is not None and len(records) != count:
        raise RemoteProtocolError(f"batch holds {len(records)} messages, expected {count}")
    return records


_UNBOUNDED = 1 << 62
_PAYLOAD_SIZE_TAG = 0x18
_parse_single = pb.SingleMessageMetadata.FromString

_compiled = speedups()
# The compiled ``py_split_batch`` when the extension is in use (``protocol._accel``).
split_batch = py_split_batch if TYPE_CHECKING or _compiled is None else _compiled.split_batch
