"""Batch payloads split into per-record columns, for bulk readers (the Spark source's Arrow path).

``split_batch`` gives one parsed header and one ``bytes`` per record: right for handing out
``Message`` objects, wasteful for a reader that wants columns. ``batch_columns`` walks the same
records once and gives each field as a column instead:

* ``value_offsets`` + ``values``: the payloads as one data buffer and ``count + 1`` int32
  offsets into it, Arrow's binary layout (``pa.Array.from_buffers(pa.binary(), count,
  [None, offsets, values])`` makes the column without a ``bytes`` per record);
* ``sequence_ids``: int64 per record, the record's own sequence id, else the entry's first
  plus the index (what ``Message.sequence_id`` answers), wrapped to 64-bit two's complement;
* ``event_times``: int64 per record, 0 where none was set; None when no record has one;
* ``keys``: the partition key's UTF-8 bytes, None where absent or empty; None when no record
  has one;
* ``properties``: each record's ``(key, value)`` pairs in wire order, None where it has none;
  None when no record has any;
* ``null_values``: one byte per record (1: a tombstone); None when there is none.

Fixed-width buffers are in native byte order, as Arrow's. Malformed payloads raise the
``RemoteProtocolError`` ``split_batch`` raises, with the same words. ``py_batch_columns`` is the
reference; ``batch_columns`` is the compiled walk (``protocol/_columns.pxi``) when built,
which hands anything but the layout clients write to the reference on the same bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol._accel import speedups
from protocol.batch import split_batch

__all__ = ["BatchColumns", "batch_columns", "py_batch_columns"]

_U64 = (1 << 64) - 1
_I64_SIGN = 1 << 63


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """The records of one batch payload as columns (see the module docstring)."""

    count: int
    value_offsets: bytes
    values: bytes
    sequence_ids: bytes
    event_times: bytes | None
    keys: list[bytes | None] | None
    properties: list[list[tuple[str, str]] | None] | None
    null_values: bytes | None


def _int64(value: int) -> int:
    value &= _U64
    return value - (1 << 64) if value & _I64_SIGN else value


def _key_bytes(key: str | bytes) -> bytes:
    # upb hands a string field that is not UTF-8 back as bytes: kept as it came.
    return key if isinstance(key, bytes) else key.encode()


def py_batch_columns(payload: bytes, count: int, first_sequence_id: int) -> BatchColumns:
    """The reference: ``split_batch``, then one column per field.

    Raises:
        RemoteProtocolError: as ``split_batch``.
    """
    records = split_batch(payload, count)
    offsets = [0]
    sequences: list[int] = []
    events: list[int] = []
    keys: list[bytes | None] = []
    properties: list[list[tuple[str, str]] | None] = []
    nulls = bytearray()
    end = 0
    for index, (single, data) in enumerate(records):
        end += len(data)
        offsets.append(end)
        own = single.sequence_id if single.HasField("sequence_id") else None
        sequences.append(_int64(first_sequence_id + index if own is None else own))
        events.append(_int64(single.event_time))
        keys.append(_key_bytes(single.partition_key) if single.partition_key else None)
        pairs = [(kv.key, kv.value) for kv in single.properties]
        properties.append(pairs or None)
        nulls.append(1 if single.null_value else 0)
    count = len(records)
    return BatchColumns(
        count=count,
        value_offsets=struct.pack(f"={count + 1}i", *offsets),
        values=b"".join(data for _, data in records),
        sequence_ids=struct.pack(f"={count}q", *sequences),
        event_times=struct.pack(f"={count}q", *events) if any(events) else None,
        keys=keys if any(key is not None for key in keys) else None,
        properties=properties if any(p is not None for p in properties) else None,
        null_values=bytes(nulls) if any(nulls) else None,
    )


_speedups = speedups()
if TYPE_CHECKING:
    batch_columns = py_batch_columns
elif _speedups is not None:
    batch_columns = _speedups.bind_columns(BatchColumns, py_batch_columns)
else:
    batch_columns = py_batch_columns
