"""run_merge: spilled runs merge to the in-memory sort's order whatever the spill points and the
arrival order (random rows: duplicates, nulls, NaN, ordering columns of several types, values
sharing long prefixes, hash ties), with a block per run held at a time (real temporary files)."""

from __future__ import annotations

import math
import random
import tracemalloc
from itertools import groupby
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spark_connector import row_order
from spark_connector.row_order import ArrowSorter, sort_columns
from tests.spark_connector.test_row_order import PLAN
from tests.spark_connector.test_row_order import SCHEMA as ROW_ORDER_SCHEMA
from tests.spark_connector.test_row_order_columns import sorted_both_ways

# test_row_order's rows, with ordering columns of three more types.
SCHEMA = pa.schema(
    [
        *ROW_ORDER_SCHEMA,
        ("seq", pa.int64()),
        ("name", pa.large_string()),
        ("day", pa.date32()),
    ]
)
#: Columns an ``exactlyOnce.orderBy`` plan may name: every type above, content roles too.
ORDERABLE = [6, 7, 8, 9, 10, 4, 3, 1]
PREFIXES = [b"", b"p" * 300, b"p" * 299 + b"q", b"p" * 150 + b"\x00" * 150]

values = st.one_of(
    st.none(),
    st.builds(bytes.__add__, st.sampled_from(PREFIXES), st.binary(max_size=2)),
)
row = st.tuples(
    values,
    st.one_of(st.none(), st.sampled_from(["", "k0", "k1"])),
    st.one_of(st.none(), st.just("t")),
    st.one_of(st.none(), st.integers(-1, 1)),
    st.one_of(st.none(), st.integers(0, 2)),
    st.one_of(
        st.none(),
        st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("01")), max_size=2,
                 unique_by=lambda pair: pair[0]),
    ),
    st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -2.0, math.inf, math.nan])),
    st.one_of(st.none(), st.lists(st.sampled_from(["x", "y"]), max_size=2)),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2)),
    st.one_of(st.none(), st.sampled_from(["", "n", "n\x00", "\u00e9"])),
    st.one_of(st.none(), st.integers(0, 3)),
)  # fmt: skip


@st.composite
def task_rows(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A task's rows: drawn from a pool of distinct-ish rows, so many are repeated."""
    pool = draw(st.lists(row, min_size=1, max_size=60))
    count = draw(st.integers(1, 500))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return [rng.choice(pool) for _ in range(count)]


def batches_of(rows: list[tuple[Any, ...]], sizes: list[int]) -> list[pa.RecordBatch]:
    """``rows`` as record batches of the given sizes (cycled)."""
    out = []
    start = 0
    for size in sizes * (len(rows) + 1):
        if start >= len(rows):
            break
        chunk = rows[start : start + size]
        start += size
        columns = [list(column) for column in zip(*chunk, strict=True)]
        arrays = [pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)]
        out.append(pa.RecordBatch.from_arrays(arrays, schema=SCHEMA))
    return out


def sorted_rows(
    batches: list[pa.RecordBatch], order: tuple[int, ...], memory: int, directory: Path
) -> tuple[list[pa.RecordBatch], int]:
    """The sorted batches and the number of runs; checks that ``sorted_columns`` (the sink's
    path: values gathered straight from what the runs hold) gives ``Columns`` of them."""
    merged, _chunks, runs = sorted_both_ways(batches, PLAN, directory, order, memory)
    return merged, runs


def _plain(value: Any) -> Any:
    """A key value compared as ``sort_indices`` does: null first, NaN next, -0.0 == 0.0."""
    if value is None:
        return (0,)
    if isinstance(value, float):
        return (1,) if math.isnan(value) else (2, value + 0.0)
    return (2, value)


def groups(batches: list[pa.RecordBatch], order: tuple[int, ...]) -> list[Any]:
    """The rows as runs of equal sort keys: (key, the rows of that key as a multiset). Rows of
    one key send the same message, so their order among themselves is no part of the result."""
    keyed = []
    for batch in batches:
        assert batch.schema == SCHEMA  # the sort keys are not sent on
        keys = [column.to_pylist() for column in sort_columns(batch, PLAN, order)]
        for index, content in enumerate(batch.to_pylist()):
            key = tuple(_plain(column[index]) for column in keys)
            keyed.append((key, repr(sorted(content.items()))))
    return [
        (key, sorted(text for _, text in rows))
        for key, rows in groupby(keyed, key=lambda pair: pair[0])
    ]


def weak_hashes(array: pa.Array) -> pa.Array | None:
    """``value_hashes`` cut to 2 bits: distinct values tie on the hash all the time."""
    hashes = REAL_HASHES(array)
    return None if hashes is None else pc.bit_wise_and(hashes, pa.scalar(3, pa.uint64()))


REAL_HASHES = row_order.value_hashes


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=task_rows(),
    order=st.lists(st.sampled_from(ORDERABLE), unique=True, max_size=3).map(tuple),
    runs=st.integers(1, 20),
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    weak=st.booleans(),
    chunk=st.integers(1, 64),
)
def test_spilled_merge_equals_the_in_memory_sort(
    tmp_path: Path,
    rows: list[tuple[Any, ...]],
    order: tuple[int, ...],
    runs: int,
    sizes: list[int],
    seed: int,
    weak: bool,
    chunk: int,
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        # Small chunks (and so small rounds: a run holds two chunks at least) make many
        # rounds of the merge out of a few hundred rows.
        patch.setattr(row_order, "_OUTPUT_CHUNK_ROWS", chunk)
        if weak:
            patch.setattr(row_order, "value_hashes", weak_hashes)
        expected, spilled = sorted_rows(batches_of(rows, [64]), order, 1 << 30, tmp_path)
        assert spilled == 0
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)  # another arrival order, other spill points
        batches = batches_of(shuffled, sizes)
        memory = max(sum(batch.nbytes for batch in batches) // runs, 1)
        merged, spilled = sorted_rows(batches, order, memory, tmp_path)
    # About ``runs`` runs (the buffer also counts the values' hashes, up to about a third
    # more with tiny rows), one at least: the merge ran.
    assert 1 <= spilled <= 2 * runs + 1
    event(f"{(spilled + 4) // 5 * 5 - 4}-{(spilled + 4) // 5 * 5} runs")
    event(f"{len(rows) // 100 * 100}+ rows")
    # Cut into the same chunks as in memory, the same rows in the same key order.
    assert [batch.num_rows for batch in merged] == [batch.num_rows for batch in expected]
    assert groups(merged, order) == groups(expected, order)


def test_duplicates_across_every_run_and_one_run(tmp_path: Path) -> None:
    """The same rows in every run (keys equal across runs at every bound), and a single run."""
    rows = [(b"p" * 300 + bytes([i % 3]), "k", None, None, None, None, None, None, i % 2, None,
             None) for i in range(90)]  # fmt: skip
    for order in ((), (8,)):
        expected, _ = sorted_rows(batches_of(rows, [90]), order, 1 << 30, tmp_path)
        for memory in (1, 1 << 30):  # a run per batch; one run (spilled at the end)
            sorter = ArrowSorter(PLAN, order, memory, str(tmp_path))
            try:
                for batch in batches_of(rows, [9]):
                    sorter.add(batch)
                if memory > 1:
                    sorter._spill()  # the one run
                merged = list(sorter.sorted_batches())
                assert len(sorter.runs) == (10 if memory == 1 else 1)
            finally:
                sorter.close()
            assert groups(merged, order) == groups(expected, order)


def test_memory_held_is_a_block_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100k rows of 100 bytes spilled with a 1 MiB buffer (10 runs, ~22 MB in all): the merge
    holds about a block per run, about the buffer in all, and sends the rows in order in
    chunks. Runs are read into Python ``bytes`` (tracemalloc), sorted and copied in Arrow's
    pool: both are counted. The runs hold two chunks at least (8192 rows each, ~3.6 MB here):
    the chunks are made smaller for this buffer."""
    monkeypatch.setattr(row_order, "_OUTPUT_CHUNK_ROWS", 1024)
    rng = random.Random(7)
    count, memory = 100_000, 1 << 20
    table = pa.table({"value": pa.array([rng.randbytes(100) for _ in range(count)], pa.binary())})
    sorter = ArrowSorter({"value": 0}, (), memory, str(tmp_path))
    pool = pa.default_memory_pool()
    try:
        for batch in table.to_batches(max_chunksize=5000):
            sorter.add(batch)
        merged = sorter.sorted_batches()
        assert len(sorter.runs) >= 10
        base = peak = pool.bytes_allocated()
        tracemalloc.start()
        previous: int | None = None
        sent = 0
        for batch in merged:
            peak = max(peak, pool.bytes_allocated())
            hashes = REAL_HASHES(batch.column(0))
            assert hashes is not None
            ordered = hashes.to_pylist()
            assert previous is None or previous <= ordered[0]
            assert ordered == sorted(ordered)
            previous = ordered[-1]
            assert batch.num_rows == min(1024, count - sent)
            sent += batch.num_rows
            del batch, hashes, ordered
        python_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sorter.close()
    assert sent == count
    assert (peak - base) + python_peak < 3 * memory, (peak - base, python_peak)
