"""Received entries to the source's Arrow columns: the raw-value read path.

``to_record_batch`` (``source``) makes its columns from ``Message`` objects, about ten method
calls and a Python object per field per row. Here a batch entry is split once into columns by
``protocol.batch_columns`` (compiled: payloads into one data buffer, offsets, sequence ids,
event times) and every column of its rows is made by Arrow at once: the values from those
buffers without a ``bytes`` per row, ``offset`` as the entry's packed position plus the index,
``messageId`` as ``"ledger:entry:"`` joined with the index's text, the entry's publish time and
producer name repeated. An entry that is one message (not batched, reassembled from chunks, or
handed out still encrypted) is one row, gathered with its neighbours into Python lists as
before. The rows are the same, in the same order, with the same values, as ``to_record_batch``
of the messages a reader hands out (tests/spark_connector/test_entry_columns.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from client.raw_entry import RawEntry
from protocol.batch_columns import batch_columns
from spark_connector.positions import pack

__all__ = ["EntryColumns"]

_MILLIS = pa.timestamp("ms", tz="UTC")
_MICROS = pa.timestamp("us", tz="UTC")
_PROPERTIES = pa.map_(pa.string(), pa.string())
# A batch index fits 16 bits (``positions.pack``): its int64 and text columns, sliced per entry.
_INDEXES = pa.array(range(1 << 16), pa.int64())
_INDEX_TEXT = _INDEXES.cast(pa.string())
_NO_EVENT = pa.scalar(None, pa.int64())


class _Rows:
    """Entries that are one message each, as Python lists (in ``EntryColumns``' order)."""

    __slots__ = (
        "events",
        "ids",
        "keys",
        "offsets",
        "producers",
        "properties",
        "published",
        "sequences",
        "values",
    )

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.offsets: list[int] = []
        self.ids: list[str] = []
        self.published: list[int] = []
        self.events: list[int | None] = []
        self.producers: list[str] = []
        self.sequences: list[int] = []
        self.properties: list[list[tuple[str, str]] | None] = []

    def add(self, entry: RawEntry) -> None:
        metadata = entry.metadata
        ledger, entry_id = entry.ledger_id, entry.entry_id
        key = metadata.partition_key
        self.keys.append(key.encode() if key else None)
        self.values.append(entry.payload)
        self.offsets.append(pack(ledger, entry_id, -1))
        self.ids.append(f"{ledger}:{entry_id}:-1")
        self.published.append(metadata.publish_time)
        self.events.append(metadata.event_time or None)
        self.producers.append(metadata.producer_name)
        self.sequences.append(metadata.sequence_id)
        pairs = [(kv.key, kv.value) for kv in metadata.properties]
        self.properties.append(pairs or None)

    def __len__(self) -> int:
        return len(self.values)

    def arrays(self) -> list[pa.Array]:
        return [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.ids, pa.string()),
            pa.array(self.published, _MILLIS).cast(_MICROS),
            pa.array(self.events, _MILLIS).cast(_MICROS),
            pa.array(self.producers, pa.string()),
            pa.array(self.sequences, pa.int64()),
            pa.array(self.properties, _PROPERTIES),
        ]


class EntryColumns:
    """Rows of entries gathered into one ``RecordBatch`` of ``schema`` (the source's
    ``ARROW_SCHEMA``: key, value, topic, partition, offset, messageId, publishTime,
    eventTime, producerName, sequenceId, properties)."""

    def __init__(self, topic: str, partition: int, schema: pa.Schema) -> None:
        self._topic = pa.scalar(topic, pa.string())
        self._partition = pa.scalar(partition, pa.int32())
        self._schema = schema
        self._parts: list[list[pa.Array]] = []  # per part: the columns but topic, partition
        self._rows = _Rows()
        self.count = 0
        """Rows gathered since the last ``take``."""

    def add(self, entry: RawEntry, taken: list[int]) -> None:
        """The rows of ``entry`` at batch indexes ``taken`` (ascending; ``[0]`` for an entry
        that is one message)."""
        self.count += len(taken)
        if not entry.is_batch or entry.encrypted:
            self._rows.add(entry)
            return
        if self._rows:
            self._parts.append(self._rows.arrays())
            self._rows = _Rows()
        columns = _batch_arrays(entry)
        first, size = taken[0], len(taken)
        if taken[-1] - first + 1 == size:  # a run (always, but after a partial ack set)
            self._parts.append([column.slice(first, size) for column in columns])
        else:
            where = pa.array(taken, pa.int64())
            self._parts.append([column.take(where) for column in columns])

    def take(self) -> pa.RecordBatch:
        """The rows gathered, as one batch; starts afresh."""
        if self._rows:
            self._parts.append(self._rows.arrays())
            self._rows = _Rows()
        parts, self._parts = self._parts, []
        count, self.count = self.count, 0
        columns = [pa.concat_arrays(list(column)) for column in zip(*parts, strict=True)]
        topic = pa.repeat(self._topic, count)
        partition = pa.repeat(self._partition, count)
        return pa.RecordBatch.from_arrays(
            [columns[0], columns[1], topic, partition, *columns[2:]], schema=self._schema
        )


def _batch_arrays(entry: RawEntry) -> list[pa.Array]:
    """Every row of a batch entry, as ``_Rows.arrays`` gives them (Arrow work per entry)."""
    metadata = entry.metadata
    count = entry.count
    split = batch_columns(entry.payload, count, metadata.sequence_id)
    ledger, entry_id = entry.ledger_id, entry.entry_id
    pack(ledger, entry_id, count - 1)  # the whole entry fits the offset column (or raises)
    indexes = _INDEXES.slice(0, count)
    values = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(split.value_offsets), pa.py_buffer(split.values)]
    )
    return [
        pa.array(split.keys, pa.binary()) if split.keys else pa.nulls(count, pa.binary()),
        values,
        pc.add(indexes, pack(ledger, entry_id, 0)),
        pc.binary_join_element_wise(f"{ledger}:{entry_id}:", _INDEX_TEXT.slice(0, count), ""),
        pa.repeat(pa.scalar(metadata.publish_time * 1000, _MICROS), count),
        _event_times(split.event_times, count),
        pa.repeat(pa.scalar(metadata.producer_name, pa.string()), count),
        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(split.sequence_ids)]),
        pa.array(split.properties, _PROPERTIES)
        if split.properties
        else pa.nulls(count, _PROPERTIES),
    ]


def _event_times(buffer: bytes | None, count: int) -> pa.Array:
    """Event times in ms (0: none) as microsecond timestamps, null where none."""
    if buffer is None:
        return pa.nulls(count, _MICROS)
    millis = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(buffer)])
    micros = pc.if_else(pc.equal(millis, 0), _NO_EVENT, pc.multiply_checked(millis, 1000))
    return micros.cast(_MICROS)
