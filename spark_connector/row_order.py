"""A task's rows in an order fixed by the *set* of rows, whatever order Spark hands them in.

The sink numbers a task's rows to make their sequence ids, so a recomputed task must number the
same rows alike. Spark does not promise the order of a recomputed partition: after a shuffle a
retried task fetches the map outputs in another order. So the sink sorts the rows first, by
the ordering columns (the source position ``topic``, ``partition``, ``offset`` when the input
comes from a ``dedup-topic`` source, which also keeps the source's order; or the columns of
``exactlyOnce.orderBy``), then everything the row sends (value, key, topic, partition, event
time, properties). Two rows with equal keys send the same message, so their relative order
changes nothing: the numbering is a pure function of the multiset of rows.

Comparing long byte strings is the sort's cost (values often share long prefixes), so right
after the ordering columns comes a 64-bit hash of the value (``protocol.row_hash``:
``rowhash64``, compiled), and the bytes only break its rare ties. The hash is a fixed function
and part of the numbering: it must never change, or a task retried by a newer build would number
its rows unlike the failed attempt of the older one (the replay guard would fail the task).

The sort runs on Arrow columns (``pyarrow.compute.sort_indices``, nulls first), not on Python
objects. Columns Arrow cannot sort (maps, lists, structs) are first turned into bytes that
stand for their value (``_canonical``); timestamps and dates sort as their integers. With no
ordering column the hashes are computed as the rows arrive, and when no two rows share one
(nor is one null) they alone order the rows (``hash_order``: a radix sort) and the other keys
are never built; the sorted rows are gathered a chunk at a time, as the sink sends them.

The sink gets those chunks as its ``rows.Columns`` (``sorted_columns``): the values go from the
unsorted buffers straight into the Python ``bytes`` the sink sends (``protocol.row_gather``),
so no sorted Arrow copy is made only to be converted (``take`` then ``to_pylist`` copied each
value twice); the other roles (key, properties...), when the input has them, are gathered by
Arrow. With every value of one length (checked once over the task's rows) no chunk computes
its rows' sizes. ``sorted_batches`` gives the same rows as record batches (spilled runs, tests).

The buffered batches are not dropped when the sort is done with them (at the end, or after a
spill): they go to ``carry_over``, which drops them one at a time as later batches arrive, so
each batch Spark reads lands in pages the one before it freed, as with at-least-once, instead
of new pages (a page fault each: as much CPU as the sort).

Rows are buffered as record batches up to a memory bound (Arrow bytes); past it, the sorted
buffer is written to a temporary Arrow IPC file (a *run*) in Spark's local directory, and the
runs are merged at the end a block per run at a time (``run_merge``: Arrow's sort on the blocks,
cut at the smallest of their last keys), so a task larger than memory is sorted with bounded
memory, into the order the in-memory sort gives, wherever the spills fell.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from protocol.row_gather import Chunk, RowGather
from protocol.row_hash import hash_order, row_hashes
from spark_connector.carry_over import carry_over
from spark_connector.rows import Columns
from spark_connector.run_merge import merge_rounds, merge_runs, sort_order

__all__ = ["ArrowSorter", "sort_columns"]

_KEY_PREFIX = "__sort_"
# A run is written in record batches of about 1/64 of the buffer (4096 rows at most): the
# merge reads a run a batch at a time, so its blocks follow the buffer, however many runs.
_RUN_BATCH_ROWS = 4096
_RUN_BATCHES_PER_BUFFER = 64
_OUTPUT_CHUNK_ROWS = 8192
_CONTENT_ROLES = ("value", "key", "topic", "partition", "eventTime", "properties")


def _norm(value: Any) -> Any:
    """A totally ordered stand-in for a nested value (None first, NaN before numbers)."""
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (1,)
    if isinstance(value, dict):
        return (2, tuple((_norm(k), _norm(v)) for k, v in sorted(value.items())))
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            value = sorted(value)  # a map's (key, value) pairs: their order is not data
        return (2, tuple(_norm(item) for item in value))
    return (2, value)


def _canonical(array: pa.Array) -> pa.Array:
    """Bytes standing for each value of a nested column (null stays null)."""
    return pa.array(
        [None if v is None else repr(_norm(v)).encode() for v in array.to_pylist()],
        pa.binary(),
    )


def _sortable(array: pa.Array) -> pa.Array:
    """``array`` as a column ``sort_indices`` orders deterministically."""
    kind = array.type
    if pa.types.is_temporal(kind):
        return array.cast(pa.int64() if kind.bit_width == 64 else pa.int32())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return array.cast(pa.binary() if pa.types.is_string(kind) else pa.large_binary())
    if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
        return _canonical(array)
    return array


def _hashable(kind: pa.DataType) -> bool:
    return any(
        check(kind)
        for check in (
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_string,
            pa.types.is_large_string,
        )
    )


def value_hashes(array: pa.Array) -> pa.Array | None:
    """``rowhash64`` of each value of a binary or string column (null stays null), as a
    ``uint64`` column; None for a column of another type (it gets no hash key)."""
    kind = array.type
    if not _hashable(kind):
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        array = array.cast(pa.binary() if pa.types.is_string(kind) else pa.large_binary())
    count = len(array)
    _validity, offsets, data = array.buffers()
    if count == 0 or data is None:
        data = b""
    wide = pa.types.is_large_binary(array.type)
    raw = row_hashes(offsets, data, array.offset, count, wide)
    hashes = pa.Array.from_buffers(pa.uint64(), count, [None, pa.py_buffer(raw)])
    if array.null_count:
        hashes = pc.if_else(array.is_valid(), hashes, pa.scalar(None, pa.uint64()))
    return hashes


def sort_columns(
    batch: pa.RecordBatch, plan: dict[str, int], order: Sequence[int]
) -> list[pa.Array]:
    """The columns ordering ``batch``'s rows: ordering columns first, then the hash of the
    value, then the content (whose bytes break the hash's ties)."""
    keys = [_sortable(batch.column(index)) for index in order]
    hashed = value_hashes(batch.column(plan["value"])) if "value" in plan else None
    if hashed is not None:
        keys.append(hashed)
    content = [plan[role] for role in _CONTENT_ROLES if role in plan]
    return keys + [_sortable(batch.column(index)) for index in content]


def _with_keys(batch: pa.RecordBatch, keys: list[pa.Array]) -> pa.RecordBatch:
    arrays = list(batch.columns) + keys
    names = list(batch.schema.names) + [f"{_KEY_PREFIX}{i}" for i in range(len(keys))]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _hash_order(hashes: list[pa.Array]) -> pa.Array | None:
    """The row order by the value's hash alone (``hash_order``: a radix sort), or None when
    a hash is null or two rows share one (then the later keys decide: the general sort).
    With distinct first keys the later ones never decide, so both ways give the one order
    the keys define."""
    column = pa.concat_arrays(hashes) if len(hashes) > 1 else hashes[0]
    if column.null_count:
        return None
    order, ties = hash_order(column.buffers()[1], column.offset, len(column))
    if ties:
        return None
    return pa.Array.from_buffers(pa.int64(), len(column), [None, pa.py_buffer(order)])


def _sort_indices(table: pa.Table, key_count: int) -> pa.Array:
    """The row order of ``table`` by its sort keys (every key, Arrow's general sort; the
    merge of spilled runs compares rows with this same function)."""
    return sort_order(table, [f"{_KEY_PREFIX}{i}" for i in range(key_count)])


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """A table of one chunk per column as its record batch (no copy)."""
    batches = table.to_batches()
    return batches[0] if len(batches) == 1 else table.combine_chunks().to_batches()[0]


def _taken(rows: pa.RecordBatch, indices: pa.Array) -> Iterator[pa.RecordBatch]:
    """``rows`` in the order of ``indices``, a chunk at a time: gathered as the sink asks for
    them, so the first rows are sent while later ones are still being gathered."""
    for start in range(0, len(indices), _OUTPUT_CHUNK_ROWS):
        yield rows.take(indices.slice(start, _OUTPUT_CHUNK_ROWS))


def _value_chunk(array: pa.Array) -> Chunk:
    """A binary or string column's buffers, as ``RowGather`` takes them."""
    validity, offsets, data = array.buffers()
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    return validity, offsets, b"" if data is None else data, array.offset, len(array), wide


def _gathered(
    chunks: list[pa.RecordBatch], indices: pa.Array, plan: dict[str, int]
) -> Iterator[Columns]:
    """The rows of ``chunks`` in the order of ``indices``, a ``Columns`` chunk at a time:
    the values straight from the unsorted buffers into Python bytes (``RowGather``: no sorted
    Arrow copy to convert), the other roles (if any) gathered by Arrow."""
    gather = RowGather([_value_chunk(chunk.column(plan["value"])) for chunk in chunks])
    # One length for every value of the task (the usual case) is one length for each chunk.
    same = gather.nulls == 0 and gather.min_size == gather.max_size
    value_size = gather.min_size if same else None
    roles = [role for role in plan if role != "value"]
    others = None
    if roles:
        others = _one_batch(pa.Table.from_batches(chunks).select([plan[r] for r in roles]))
    order, first = indices.buffers()[1], indices.offset
    for start in range(0, len(indices), _OUTPUT_CHUNK_ROWS):
        stop = min(start + _OUTPUT_CHUNK_ROWS, len(indices))
        bounds = (order, first + start, first + stop)

        def lengths(bounds: tuple[Any, int, int] = bounds) -> pa.Array:
            raw = gather.sizes(*bounds)
            return pa.Array.from_buffers(pa.int64(), len(raw) // 8, [None, pa.py_buffer(raw)])

        arrays = {}
        if others is not None:
            taken = others.take(indices.slice(start, stop - start))
            arrays = dict(zip(roles, taken.columns, strict=True))
        yield Columns.gathered(gather.values(*bounds), lengths, value_size, arrays)


def _spill_directory() -> str | None:
    """Spark's local directory for this executor (``SPARK_LOCAL_DIRS``), else the system's."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    return dirs.split(",")[0] or None


class ArrowSorter:
    """Sorts a task's record batches within ``memory_bytes`` (Arrow bytes), spilling runs."""

    def __init__(
        self,
        plan: dict[str, int],
        order: Sequence[int],
        memory_bytes: int,
        directory: str | None = None,
    ) -> None:
        self.plan = plan
        self.order = tuple(order)
        self.memory_bytes = memory_bytes
        self.directory = directory if directory is not None else _spill_directory()
        self.runs: list[IO[bytes]] = []
        # Every batch added since the last spill: handed on when no longer needed
        # (``carry_over``: the batches read later reuse their pages).
        self._added: list[pa.RecordBatch] = []
        # The rows as they came, and (radix path) the hash of each batch's values: the other
        # sort keys are built only when needed (a run, a tie, ordering columns), which spares
        # copying the value column a second time as a key.
        self._buffer: list[pa.RecordBatch] = []
        self._hashes: list[pa.Array] | None = [] if not self.order else None
        self._bytes = 0
        self._keys = 0
        self._columns: list[str] | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._columns is None:
            self._columns = list(batch.schema.names)
        carry_over.arrived(batch.nbytes)
        self._added.append(batch)
        self._buffer.append(batch)
        self._bytes += batch.nbytes
        if self._hashes is not None:
            value = self.plan.get("value")
            hashes = None if value is None else value_hashes(batch.column(value))
            if hashes is None:
                self._hashes = None  # no hash key (no binary value): the general sort
            else:
                self._hashes.append(hashes)
                self._bytes += hashes.nbytes
        if self._bytes >= self.memory_bytes:
            self._spill()
            self._hand_over()  # the run holds them now

    def _keyed(self) -> pa.Table:
        """The buffered rows with every sort key, in one chunk (``take`` across chunks
        resolves each index's chunk, several times slower)."""
        keyed = []
        for batch in self._buffer:
            keys = sort_columns(batch, self.plan, self.order)
            self._keys = len(keys)
            keyed.append(_with_keys(batch, keys))
        return pa.Table.from_batches(keyed).combine_chunks()

    def _take_buffer(self) -> None:
        self._buffer = []
        self._hashes = [] if self._hashes is not None else None
        self._bytes = 0

    def _ordered_buffer(self, keep_keys: bool) -> tuple[pa.RecordBatch, pa.Array]:
        """The buffered rows in one batch (with their sort keys only when ``keep_keys``: a
        run) and their sorted order."""
        if not keep_keys:
            chunks, indices = self._ordered_chunks()
            return _one_batch(pa.Table.from_batches(chunks)), indices
        table = self._keyed()
        self._take_buffer()
        return _one_batch(table), _sort_indices(table, self._keys)

    def _ordered_chunks(self) -> tuple[list[pa.RecordBatch], pa.Array]:
        """The buffered rows, as batches (no copy on the radix path), and their sorted order
        (``int64`` row numbers across the batches), without the sort keys."""
        if self._hashes:
            indices = _hash_order(self._hashes)
            if indices is not None:
                chunks = self._buffer
                self._take_buffer()
                return chunks, indices
        table = self._keyed()
        self._take_buffer()
        indices = _sort_indices(table, self._keys).view(pa.int64())  # row numbers < 2^63
        return [_one_batch(self._strip(table))], indices

    def _spill(self) -> None:
        rows, indices = self._ordered_buffer(keep_keys=True)
        table = pa.Table.from_batches([rows.take(indices)])
        # Deleted by the OS when closed (or when the worker dies): no files left behind.
        run = tempfile.TemporaryFile(  # noqa: SIM115 - kept open until the merge, closed by close()
            prefix="dedup-topic-sort-", dir=self.directory
        )
        with pa.ipc.new_stream(run, table.schema) as stream:
            stream.write_table(table, max_chunksize=self._run_batch_rows(table))
        run.seek(0)
        self.runs.append(run)

    def _run_batch_rows(self, table: pa.Table) -> int:
        """The rows of a run's record batch: about 1/64 of the buffer, 1 to 4096."""
        row_bytes = max(int(table.nbytes) // max(int(table.num_rows), 1), 1)
        rows = self.memory_bytes // _RUN_BATCHES_PER_BUFFER // row_bytes
        return min(max(rows, 1), _RUN_BATCH_ROWS)

    def sorted_batches(self) -> Iterator[pa.RecordBatch]:
        """Every row added, sorted, without the sort keys (call once, after the last ``add``)."""
        if not self.runs:
            if not self._buffer:
                return iter(())
            rows, indices = self._ordered_buffer(keep_keys=False)
            return _taken(rows, indices)
        if self._buffer:
            self._spill()
        return self._merge()

    def sorted_columns(self) -> Iterator[Columns]:
        """Every row added, sorted, as the sink's ``Columns`` chunks (call once, after the
        last ``add``; instead of ``sorted_batches``, the same rows in the same order)."""
        plan = self.plan
        if self.runs:
            if self._buffer:
                self._spill()
            return self._merged_columns()
        if not self._buffer:
            return iter(())
        chunks, indices = self._ordered_chunks()
        if not _hashable(chunks[0].column(plan["value"]).type):
            rows = _one_batch(pa.Table.from_batches(chunks))
            return (Columns(batch, plan) for batch in _taken(rows, indices))
        return _gathered(chunks, indices, plan)

    def _strip(self, table: pa.Table | pa.RecordBatch) -> Any:
        assert self._columns is not None
        return table.select(self._columns)

    def _merge(self) -> Iterator[pa.RecordBatch]:
        """The runs merged into one sorted stream, without the sort keys."""
        assert self._columns is not None
        keys, block_bytes = self._merge_plan()
        return merge_runs(self.runs, keys, self._columns, block_bytes, _OUTPUT_CHUNK_ROWS)

    def _merged_columns(self) -> Iterator[Columns]:
        """The runs merged, as ``Columns`` chunks: each round's values gathered straight from
        the batches the runs hold (``RowGather``, as in memory), without a sorted copy."""
        plan = self.plan
        keys, block_bytes = self._merge_plan()
        for held, emitted in merge_rounds(self.runs, keys, block_bytes, _OUTPUT_CHUNK_ROWS):
            if _hashable(held[0].column(plan["value"]).type):
                yield from _gathered(held, emitted, plan)
            else:
                rows = _one_batch(self._strip(pa.Table.from_batches(held)))
                yield from (Columns(batch, plan) for batch in _taken(rows, emitted))

    def _merge_plan(self) -> tuple[list[str], int]:
        """The sort keys' names, and the bytes each run holds at a time: ``1 / (2 * runs)``
        of the buffer, so that with the copy a round makes of what it emits the merge holds
        about the buffer (plus a batch read ahead per run, 1/64 of the buffer)."""
        keys = [f"{_KEY_PREFIX}{i}" for i in range(self._keys)]
        return keys, max(self.memory_bytes // (2 * len(self.runs)), 1)

    def close(self) -> None:
        runs, self.runs = self.runs, []
        for run in runs:
            run.close()
        self._buffer = []
        self._hashes = None
        self._hand_over()

    def _hand_over(self) -> None:
        added, self._added = self._added, []
        carry_over.hand_over(added)
