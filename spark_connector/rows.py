"""The sink's input rows as messages: Arrow record batches read column-wise, no Spark ``Row``.

``SinkRow`` is what one row becomes on the wire (value, key, target topic, partition, event time,
properties) plus ``order``: the values of the columns that give the task's rows their order
(``row_order``), which are not sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_connector.options import OptionError

__all__ = ["SinkRow", "sink_rows"]


@dataclass(frozen=True, slots=True)
class SinkRow:
    value: bytes | None
    key: str | None
    topic: str | None
    partition: int | None
    event_time: int | None
    properties: dict[str, str] | None
    order: tuple[Any, ...] = ()


def sink_rows(
    batch: pa.RecordBatch, plan: dict[str, int], order: Sequence[int] = ()
) -> Iterator[SinkRow]:
    """The batch's rows; ``order``: indexes of the ordering columns."""
    count = batch.num_rows
    nothing: list[Any] = [None] * count

    def column(role: str, convert: Callable[[pa.Array], list[Any]] | None = None) -> list[Any]:
        index = plan.get(role)
        if index is None:
            return nothing
        array = batch.column(index)
        return convert(array) if convert is not None else array.to_pylist()

    values = column("value", _bytes)
    keys = column("key", _key_text)
    topics = column("topic")
    partitions = column("partition")
    events = column("eventTime", _millis)
    properties = column("properties")
    ordering = [batch.column(index).to_pylist() for index in order]
    for i in range(count):
        props = properties[i]
        yield SinkRow(
            values[i],
            keys[i],
            topics[i],
            partitions[i],
            events[i],
            dict(props) if props else None,
            tuple(values_of[i] for values_of in ordering),
        )


def _bytes(array: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return [None if v is None else v.encode() for v in array.to_pylist()]
    values: list[bytes | None] = array.to_pylist()
    return values


def _key_text(array: pa.Array) -> list[str | None]:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        texts: list[str | None] = array.to_pylist()
        return texts
    out: list[str | None] = []
    for raw in array.to_pylist():
        try:
            out.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise OptionError("dedup-topic sink: a binary key is not UTF-8 text") from None
    return out


def _millis(array: pa.Array) -> list[int | None]:
    unit = {"s": 1000, "ms": 1, "us": 1 / 1000, "ns": 1 / 1_000_000}[array.type.unit]
    raw = array.cast(pa.int64()).to_pylist()
    return [None if v is None else int(v * unit) for v in raw]
