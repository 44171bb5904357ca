"""A task's rows in an order fixed by the *set* of rows, whatever order Spark hands them in.

The sink numbers a task's rows to make their sequence ids, so a recomputed task must number the
same rows alike. Spark does not promise the order of a recomputed partition: after a shuffle a
retried task fetches the map outputs in another order. So the sink sorts the rows first, by
``sort_key``: the ordering columns (the source position ``topic``, ``partition``, ``offset`` when
the input comes from a ``dedup-topic`` source, which also keeps the source's order; or the
columns of ``exactlyOnce.orderBy``), then everything the row sends (value, key, topic,
partition, event time, properties). Two rows with equal keys send the same message, so their
relative order changes nothing: the numbering is a pure function of the multiset of rows.

Rows are buffered up to a memory bound (estimated bytes); past it, the sorted buffer is pickled
to a temporary file (a *run*) in Spark's local directory, and the runs are merged at the end
(``heapq.merge``), so a task larger than memory is sorted with bounded memory.
"""

from __future__ import annotations

import heapq
import os
import pickle
import tempfile
from collections.abc import Iterator
from operator import itemgetter
from typing import IO, Any

from spark_connector.rows import SinkRow

__all__ = ["RowSorter", "sort_key"]

_RUN_CHUNK_ROWS = 1024
_ROW_OVERHEAD_BYTES = (
    256  # Python objects around a row (dataclass, key tuple, list slot), estimated
)
_first = itemgetter(0)


def _norm(value: Any) -> Any:
    """A totally ordered stand-in for a nested value (None first, NaN after every float)."""
    if value is None:
        return (0,)
    if isinstance(value, float):
        return (1, 1, 0.0) if value != value else (1, 0, value)
    if isinstance(value, dict):
        return (1, tuple((_norm(k), _norm(v)) for k, v in sorted(value.items())))
    if isinstance(value, (list, tuple)):
        return (1, tuple(_norm(item) for item in value))
    return (1, value)


def sort_key(row: SinkRow) -> tuple[Any, ...]:
    """The row's place in its task: ordering columns first, then the whole message.

    Flat, with each field's value before its is-None flag, so most comparisons end at the first
    element that differs without building nested tuples; the flag still tells ``None`` from an
    empty value (a flag is compared only when the values are equal).
    """
    value, key, topic, partition, event = (
        row.value,
        row.key,
        row.topic,
        row.partition,
        row.event_time,
    )
    properties = tuple(sorted(row.properties.items())) if row.properties else ()
    content = (
        value or b"",
        value is None,
        key or "",
        key is None,
        topic or "",
        partition if partition is not None else -1,
        event if event is not None else -1,
        event is None,
        properties,
        row.properties is None,
    )
    # ``()`` without ordering columns: one shared object, equal to itself at once.
    order = tuple(_norm(item) for item in row.order) if row.order else ()
    return (order, *content)


def _spill_directory() -> str | None:
    """Spark's local directory for this executor (``SPARK_LOCAL_DIRS``), else the system's."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    return dirs.split(",")[0] or None


class RowSorter:
    """Sorts rows by ``sort_key`` within ``memory_bytes`` (estimated), spilling runs to disk."""

    def __init__(self, memory_bytes: int, directory: str | None = None) -> None:
        self.memory_bytes = memory_bytes
        self.directory = directory if directory is not None else _spill_directory()
        self.runs: list[IO[bytes]] = []
        self._buffer: list[tuple[tuple[Any, ...], SinkRow]] = []
        self._bytes = 0

    def add(self, row: SinkRow, size: int) -> None:
        """Add a row of ``size`` estimated payload bytes."""
        self._buffer.append((sort_key(row), row))
        self._bytes += size + _ROW_OVERHEAD_BYTES
        if self._bytes >= self.memory_bytes:
            self._spill()

    def _spill(self) -> None:
        self._buffer.sort(key=_first)
        # Deleted by the OS when closed (or when the worker dies): no files left behind.
        run = tempfile.TemporaryFile(  # noqa: SIM115 - kept open until the merge, closed by close()
            prefix="dedup-topic-sort-", dir=self.directory
        )
        buffer = self._buffer
        for start in range(0, len(buffer), _RUN_CHUNK_ROWS):
            pickle.dump(buffer[start : start + _RUN_CHUNK_ROWS], run, pickle.HIGHEST_PROTOCOL)
        run.seek(0)
        self.runs.append(run)
        self._buffer = []
        self._bytes = 0

    def sorted_rows(self) -> Iterator[SinkRow]:
        """Every row added, in ``sort_key`` order (call once, after the last ``add``)."""
        self._buffer.sort(key=_first)
        if not self.runs:
            return (row for _, row in self._buffer)
        merged = heapq.merge(*(_read_run(run) for run in self.runs), self._buffer, key=_first)
        return (row for _, row in merged)

    def close(self) -> None:
        runs, self.runs = self.runs, []
        for run in runs:
            run.close()
        self._buffer = []


def _read_run(run: IO[bytes]) -> Iterator[tuple[tuple[Any, ...], SinkRow]]:
    while True:
        try:
            chunk = pickle.load(run)
        except EOFError:
            return
        yield from chunk
