"""Sorted runs (Arrow IPC streams) merged into one sorted stream, a block at a time, in Arrow.

``row_order`` spills a task's rows that do not fit its buffer as sorted *runs* and merges them at
the end. Merging row by row in Python (a heap of per-row key tuples) cost more than the rest of
the sink together, so the merge works on blocks with ``pyarrow.compute`` only:

* each run is read a record batch at a time and holds about ``block_bytes`` (a batch at least):
  every round tops every run up to that, so the memory held is about a block per run (plus the
  batch read ahead) whatever the task's size, and the runs' last keys stay close together;
* the *bound* of a round is the smallest of the open runs' last keys read so far (a run with
  nothing left to read bounds nothing): every row still unread is at least the bound, so every
  row held that is at most the bound can be emitted now;
* the rows held (what each run has read and not emitted) are sorted together by
  ``sort_indices`` with a copy of the bound row appended last. The sort is stable, so the copy
  lands after every row equal to it: the rows before it are exactly those at most the bound,
  emitted in that order, and the rows after it wait for the next round;
* what a run emitted is a prefix of the rows it held (they are sorted), so what it still holds
  is a slice of its batches, not a copy. The run that gave the bound emits all it held, so every
  round makes progress; as every run was topped up, a round emits most of what it sorted.

Rows are compared only by ``sort_indices`` with the same keys and options as the in-memory sort
(nulls first, NaN before numbers), so the merged order is the in-memory order. Rows with equal
keys send the same message, so which of two equal rows comes first does not matter; where the
runs were cut (the spill points) changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["merge_rounds", "merge_runs", "sort_order"]

#: The column naming the run a held row came from (to know what each run emitted).
_RUN = "__run"


def sort_order(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """The stable row order of ``table`` by ``keys`` (ascending, nulls first), the one order
    the in-memory sort gives."""
    return pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start") for name in keys])


class _Run:
    """One run read a batch at a time, one batch ahead (to know when it is done). Each
    batch gets a column holding the run's number, to count what a round took from each run."""

    def __init__(self, number: int, file: IO[bytes]) -> None:
        self.number = number
        self._reader = pa.ipc.open_stream(file)
        self._tag = pa.array([], pa.int32())
        self._next = self._read()
        self._block_rows = 0  # the rows of a block, from the first batch's row size
        self.last: pa.Table | None = None  # the last row read: what this run bounds
        self.held: list[pa.RecordBatch] = []  # the rows read and not yet emitted, sorted
        self._held_rows = 0

    @property
    def done(self) -> bool:
        """Nothing left to read: the run no longer bounds the rows that can be emitted."""
        return self._next is None

    def _read(self) -> pa.RecordBatch | None:
        try:
            batch = self._reader.read_next_batch()
        except StopIteration:
            return None
        if not batch.num_rows:
            return self._read()
        if len(self._tag) < batch.num_rows:  # made once per run (batches have one size)
            self._tag = pa.array([self.number] * batch.num_rows, pa.int32())
        return batch.append_column(_RUN, self._tag.slice(0, batch.num_rows))

    def top_up(self, block_bytes: int, least_rows: int) -> None:
        """Read batches until the run holds about ``block_bytes``, ``least_rows`` at least (a
        batch at least)."""
        read = False
        while self._next is not None and self._held_rows < max(self._block_rows, 1):
            batch = self._next
            if not self._block_rows:
                rows = block_bytes * batch.num_rows // max(batch.nbytes, 1)
                self._block_rows = max(rows, least_rows)
            self.held.append(batch)
            self._held_rows += batch.num_rows
            self._next = self._read()
            read = True
        if read:
            last = self.held[-1]
            self.last = pa.Table.from_batches([last.slice(last.num_rows - 1, 1)])

    def emit(self, count: int) -> None:
        """Drop the first ``count`` rows held (they were emitted)."""
        self._held_rows -= count
        while count:
            first = self.held[0]
            if first.num_rows > count:
                self.held[0] = first.slice(count)
                return
            count -= first.num_rows
            del self.held[0]


def _bound(runs: list[_Run], keys: Sequence[str]) -> pa.RecordBatch | None:
    """The smallest last row of the runs not done (one row), or None: all read."""
    lasts = [run.last for run in runs if not run.done and run.last is not None]
    if not lasts:
        return None
    table = pa.concat_tables(lasts)
    smallest = table.take(sort_order(table, keys).slice(0, 1)).combine_chunks()
    return smallest.to_batches()[0]


def _emitted_per_run(table: pa.Table, emitted: pa.Array) -> dict[int, int]:
    """How many of the rows ``emitted`` came from each run (by their run number column)."""
    counts = pc.value_counts(table.column(_RUN).take(emitted)).to_pylist()
    return {count["values"]: count["counts"] for count in counts}


#: A round of the merge: the batches held, and the rows sent (row numbers into them, in order).
Round = tuple[list[pa.RecordBatch], pa.Array]


def _rounds(
    files: Sequence[IO[bytes]], keys: Sequence[str], block_bytes: int, least_rows: int
) -> Iterator[Round]:
    """The rows of the sorted runs ``files`` (each sorted by ``keys``) in key order, a round
    at a time: the batches the runs held (laid end to end; with the sort keys and a run
    number column) and the rows the round emits, as ``int64`` row numbers into them, in
    order. Use each round before asking for the next."""
    runs = [_Run(number, file) for number, file in enumerate(files)]
    least = -(-least_rows // max(len(runs), 1))
    while True:
        # Every run tops up to a block, so their last keys stay close together and a round
        # emits most of what it sorts (refilling only the run that gave the bound would emit
        # about one block per round while sorting one per run).
        for run in runs:
            run.top_up(block_bytes, least)
        held = [batch for run in runs for batch in run.held]
        if not held:
            return
        bound = _bound(runs, keys)
        table = pa.Table.from_batches(held if bound is None else [*held, bound])
        order = sort_order(table, keys).view(pa.int64())  # row numbers < 2^63
        if bound is None:  # every run read: the rest goes out
            yield held, order
            return
        # The bound's copy went after every row at most the bound: those go out now.
        emitted = order.slice(0, pc.index(order, table.num_rows - 1).as_py())
        yield held, emitted
        # What a run emitted is a prefix of what it held (its rows are sorted).
        for number, count in _emitted_per_run(table, emitted).items():
            runs[number].emit(count)


def merge_rounds(
    files: Sequence[IO[bytes]], keys: Sequence[str], block_bytes: int, chunk_rows: int
) -> Iterator[Round]:
    """The rows of the sorted runs ``files`` (each sorted by ``keys``) in key order, a round
    at a time: record batches (with the sort keys and a run number column) and the rows the
    round sends, as ``int64`` row numbers into the batches laid end to end, in order. Each
    round but the last sends a multiple of ``chunk_rows``: the chunks the sink gets are cut
    where the in-memory sort cuts them, wherever the spills fell. Use a round before asking
    for the next.

    The runs hold ``block_bytes`` each, and two chunks together at least, so that a round
    sends a chunk or more: what a round cannot send in whole chunks (a tail, less than a
    chunk) is copied and sent first in the next round."""
    tail: pa.Table | None = None
    for held, sent in _rounds(files, keys, block_bytes, 2 * chunk_rows):
        if tail is not None:
            first = pa.array(range(tail.num_rows), pa.int64())
            sent = pa.concat_arrays([first, pc.add(sent, tail.num_rows)])
            held = [*tail.to_batches(), *held]
        whole = len(sent) // chunk_rows * chunk_rows
        if whole:
            yield held, sent.slice(0, whole)
        tail = None
        if whole < len(sent):
            tail = pa.Table.from_batches(held).take(sent.slice(whole)).combine_chunks()
    if tail is not None:
        yield tail.to_batches(), pa.array(range(tail.num_rows), pa.int64())


def merge_runs(
    files: Sequence[IO[bytes]],
    keys: Sequence[str],
    columns: Sequence[str],
    block_bytes: int,
    chunk_rows: int,
) -> Iterator[pa.RecordBatch]:
    """The rows of the sorted runs ``files`` merged in key order (``merge_rounds``), as record
    batches of ``columns`` of ``chunk_rows`` rows (the last one fewer)."""
    for held, sent in merge_rounds(files, keys, block_bytes, chunk_rows):
        rows = pa.Table.from_batches(held).select(columns).take(sent)
        for start in range(0, rows.num_rows, chunk_rows):
            yield rows.slice(start, chunk_rows).combine_chunks().to_batches()[0]
