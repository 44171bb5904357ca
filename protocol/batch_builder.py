"""Batch payloads from columns: the records of many messages serialized in one pass (sans-I/O).

A batch entry's payload is a run of records ``[u32 size][SingleMessageMetadata][payload]``
(``protocol.batch`` decodes them). ``client.batching.BatchBuilder`` makes one record per
``OutgoingMessage``; ``pack_records`` makes them straight from columns (one Python list per
message field, as a bulk sender holds them), with no per-message object at all: this is the
producer's bulk path (``client.producer.bulk``).

``pack_records(payloads, first_sequence_id, start, max_messages, max_bytes, ...)`` packs rows
``start, start+1, ...`` until ``max_messages`` rows are in, or until the next record would push
the payload past ``max_bytes`` (the first record always goes in, however large: the caller
decides what a lone oversized row means). It returns the payload and the row where it stopped.

Row ``i`` is the message: ``payloads[i]`` (``None``: a null value, an empty payload with
``null_value``), ``keys[i]`` (partition key, ``None``: none), ``properties[i]`` (a str -> str
mapping, ``None`` or empty: none), ``event_times[i]`` (ms, ``None`` or 0: none) and sequence id
``sequence_ids[i]``, or ``first_sequence_id + i`` when ``sequence_ids`` is None. Each record's
header is byte for byte what ``client.batching.single_metadata(...).SerializeToString()`` gives
(fields in number order, as protobuf writes them; a test holds them equal).

The compiled version (``protocol/_batch_builder.pxi`` in ``_speedups``) has the same signature
and results, errors included; ``protocol._accel`` picks it unless ``MAGNETAR_PURE_PYTHON=1``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from protocol._accel import speedups

__all__ = ["pack_records", "py_pack_records"]

_U32 = struct.Struct(">I")
_U64_LIMIT = 1 << 64
# Field tags of SingleMessageMetadata (field number << 3 | wire type).
_TAG_PROPERTY = b"\x0a"
_TAG_KEY = b"\x12"  # partition_key; also KeyValue.value
_TAG_PAYLOAD_SIZE = b"\x18"
_TAG_EVENT_TIME = b"\x28"
_TAG_SEQUENCE_ID = b"\x40"
_NULL_VALUE = b"\x48\x01"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _text(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value.encode()


def _properties(properties: Any) -> bytes:
    if not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a mapping, not {type(properties).__name__}")
    parts = []
    for key, value in properties.items():
        k, v = _text(key, "a property key"), _text(value, "a property value")
        pair = b"".join((_TAG_PROPERTY, _varint(len(k)), k, _TAG_KEY, _varint(len(v)), v))
        parts.append(_TAG_PROPERTY + _varint(len(pair)) + pair)
    return b"".join(parts)


def _unsigned(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value < _U64_LIMIT:
        raise ValueError(f"{what} {value} is outside 0 .. 2**64-1")
    return value


def _header(
    payload: bytes | None,
    key: Any,
    properties: Any,
    event_time: Any,
    sequence_id: int,
) -> bytes:
    """One record's ``SingleMessageMetadata``, fields in number order."""
    parts = []
    if properties:
        parts.append(_properties(properties))
    if key is not None:
        data = _text(key, "a key")
        parts += (_TAG_KEY, _varint(len(data)), data)
    parts += (_TAG_PAYLOAD_SIZE, _varint(0 if payload is None else len(payload)))
    if event_time:
        parts += (_TAG_EVENT_TIME, _varint(_unsigned(event_time, "an event time")))
    parts += (_TAG_SEQUENCE_ID, _varint(sequence_id))
    if payload is None:
        parts.append(_NULL_VALUE)
    return b"".join(parts)


def py_pack_records(
    payloads: Sequence[bytes | None],
    first_sequence_id: int,
    start: int,
    max_messages: int,
    max_bytes: int,
    keys: Sequence[str | None] | None = None,
    properties: Sequence[Mapping[str, str] | None] | None = None,
    event_times: Sequence[int | None] | None = None,
    sequence_ids: Sequence[int] | None = None,
) -> tuple[bytes, int]:
    """The records of rows ``start ..`` (see the module docstring) and the row after the last.

    Raises:
        ValueError: ``start`` is not a row, a limit is below 1, a sequence id or event time is
            outside uint64, sequence ids do not increase, or a column is shorter than
            ``payloads``.
        TypeError: a value of the wrong type (payload not bytes, key not str, ...).
    """
    count = len(payloads)
    if not 0 <= start < count:
        raise ValueError(f"start {start} is not a row of {count}")
    if max_messages < 1 or max_bytes < 1:
        raise ValueError("max_messages and max_bytes must be at least 1")
    for column in (keys, properties, event_times, sequence_ids):
        if column is not None and len(column) < count:
            raise ValueError("every column must have a value for each payload")
    records: list[bytes] = []
    size = 0
    previous = -1
    row = start
    while row < count and row - start < max_messages:
        payload = payloads[row]
        if payload is not None and not isinstance(payload, bytes):
            raise TypeError(f"a payload must be bytes or None, not {type(payload).__name__}")
        if sequence_ids is None:
            sequence_id = _unsigned(first_sequence_id + row, "a sequence id")
        else:
            sequence_id = _unsigned(sequence_ids[row], "a sequence id")
        if sequence_id <= previous:
            raise ValueError(f"sequence id {sequence_id} does not follow {previous}")
        header = _header(
            payload,
            None if keys is None else keys[row],
            None if properties is None else properties[row],
            None if event_times is None else event_times[row],
            sequence_id,
        )
        record = 4 + len(header) + (0 if payload is None else len(payload))
        if records and size + record > max_bytes:
            break
        records += (_U32.pack(len(header)), header, payload or b"")
        size += record
        previous = sequence_id
        row += 1
    return b"".join(records), row


_compiled = speedups()
pack_records = py_pack_records if _compiled is None else _compiled.pack_records
