"""The sink's input rows as messages, column-wise: Arrow record batches in, Python lists out.

``Columns`` holds one chunk of rows as one Python list per message field (value, key, target
topic, partition, event time, properties), converted from Arrow a whole column at a time
(``to_pylist`` runs in C), plus each row's estimated size in a batch entry (computed by
``pyarrow.compute``). The sink's send loop indexes these lists; no per-row object is built
except for the rare row the replay guard compares (``Columns.row``: a ``SinkRow``).

When every row of a chunk has one estimated size (rows of one length: the usual case), that
size is ``uniform`` and ``sizes`` is built as ``[size] * count`` instead of one integer per
row from Arrow; the batch cutter then cuts by arithmetic (``batches.BatchCutter.split``).

The exactly-once sink's sorted chunks come ready-made (``Columns.gathered``: ``row_order``
builds the values' bytes from the unsorted rows and knows when every value has one length);
the same lists, sizes and ``uniform`` as ``Columns`` of the sorted record batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_connector.options import OptionError

__all__ = ["RECORD_OVERHEAD", "Columns", "SinkRow", "properties_size"]

RECORD_OVERHEAD = 32  # per-message metadata in a batch (ids, sizes, time), estimated


@dataclass(frozen=True, slots=True)
class SinkRow:
    """One row as the message it sends (what the replay guard compares)."""

    value: bytes | None
    key: str | None
    topic: str | None
    partition: int | None
    event_time: int | None
    properties: dict[str, str] | None


def properties_size(properties: dict[str, str] | None) -> int:
    """Estimated bytes of a row's properties inside a batch entry."""
    if not properties:
        return 0
    return sum(len(k) + len(v) + 4 for k, v in properties.items())


class Columns:
    """One chunk of rows, column-wise; a role the input lacks is None (all rows null)."""

    __slots__ = (
        "count",
        "events",
        "keys",
        "partitions",
        "properties",
        "sizes",
        "topics",
        "uniform",
        "values",
    )

    def __init__(self, batch: pa.RecordBatch, plan: dict[str, int]) -> None:
        value = batch.column(plan["value"])  # the plan requires it
        arrays = {role: batch.column(index) for role, index in plan.items() if role != "value"}
        self._fill(batch.num_rows, _bytes(value), lambda: _lengths(value), None, arrays)

    @classmethod
    def gathered(
        cls,
        values: list[bytes | None],
        value_lengths: Callable[[], pa.Array],
        value_size: int | None,
        arrays: dict[str, pa.Array],
    ) -> Columns:
        """A chunk whose values are already Python bytes (``row_order`` gathers them from the
        unsorted rows): ``value_lengths()`` gives their lengths as an Arrow column (null: 0),
        called only when needed; ``value_size`` is the one length of every value when known
        (no null either); ``arrays`` the chunk's other roles (``Columns(batch, plan)``'s)."""
        columns = cls.__new__(cls)
        columns._fill(len(values), values, value_lengths, value_size, arrays)
        return columns

    def _fill(
        self,
        count: int,
        values: list[bytes | None],
        value_lengths: Callable[[], pa.Array],
        value_size: int | None,
        arrays: dict[str, pa.Array],
    ) -> None:
        self.count: int = count
        self.values: list[bytes | None] = values
        key = arrays.get("key")
        self.keys: list[str | None] | None = None if key is None else _key_text(key)
        topic = arrays.get("topic")
        self.topics: list[str | None] | None = None if topic is None else topic.to_pylist()
        partition = arrays.get("partition")
        self.partitions: list[int | None] | None = (
            None if partition is None else partition.to_pylist()
        )
        event = arrays.get("eventTime")
        self.events: list[int | None] | None = None if event is None else _millis(event)
        props = arrays.get("properties")
        self.properties: list[dict[str, str] | None] | None = (
            None if props is None else [dict(p) if p else None for p in props.to_pylist()]
        )
        self.uniform: int | None = None
        if value_size is not None and key is None and props is None and count:
            # Every row the same size, known without a pass over the chunk.
            self.uniform = value_size + RECORD_OVERHEAD
            self.sizes: list[int] = [self.uniform] * count
        else:
            self.sizes = self._sizes(value_lengths(), key)

    def _sizes(self, value_lengths: pa.Array, key: pa.Array | None) -> list[int]:
        """Each row's estimated bytes in a batch entry (``batches``), vectorized; sets
        ``uniform`` when they are all equal."""
        total = pc.add(value_lengths, RECORD_OVERHEAD)
        if key is not None:
            total = pc.add(total, pc.fill_null(pc.binary_length(key), 0))
        if self.properties is None and self.count:
            bounds = pc.min_max(total)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low == high:
                self.uniform = low
                return [low] * self.count
        sizes: list[int] = total.to_pylist()
        if self.properties is not None:
            sizes = [s + properties_size(p) for s, p in zip(sizes, self.properties, strict=True)]
        return sizes

    def row(self, i: int) -> SinkRow:
        """Row ``i`` as a ``SinkRow``."""

        def at(values: list[Any] | None) -> Any:
            return None if values is None else values[i]

        return SinkRow(
            self.values[i],
            at(self.keys),
            at(self.topics),
            at(self.partitions),
            at(self.events),
            at(self.properties),
        )


def _lengths(value: pa.Array) -> pa.Array:
    """Each value's length in bytes (null: 0)."""
    return pc.fill_null(pc.binary_length(value), 0)


def _bytes(array: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary() if pa.types.is_string(array.type) else pa.large_binary())
    values: list[bytes | None] = array.to_pylist()
    return values


def _key_text(array: pa.Array) -> list[str | None]:
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        try:
            array = array.cast(pa.string())  # validates UTF-8
        except pa.ArrowInvalid:
            raise OptionError("dedup-topic sink: a binary key is not UTF-8 text") from None
    texts: list[str | None] = array.to_pylist()
    return texts


def _millis(array: pa.Array) -> list[int | None]:
    unit = {"s": 1000, "ms": 1, "us": 1 / 1000, "ns": 1 / 1_000_000}[array.type.unit]
    raw = array.cast(pa.int64()).to_pylist()
    return [None if v is None else int(v * unit) for v in raw]
