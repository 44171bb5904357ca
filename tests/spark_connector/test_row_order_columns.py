"""row_order's ``sorted_columns``: the sink's ``Columns`` chunks gathered straight from the
unsorted rows (``RowGather``) hold exactly what ``Columns`` of the sorted batches holds, chunk by
chunk, on every path (radix, general sort, spilled runs), with the compiled gather and the
reference."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from protocol import _speedups
from protocol.row_gather import PyRowGather
from spark_connector import row_order
from spark_connector.row_order import ArrowSorter
from spark_connector.rows import RECORD_OVERHEAD, Columns
from tests.spark_connector.test_row_order import ORDER_F, PLAN, batches_of, make_rows


@pytest.fixture(params=["compiled", "reference"])
def gather(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with the compiled ``RowGather`` and again with the reference."""
    gather_class = _speedups.RowGather if request.param == "compiled" else PyRowGather
    monkeypatch.setattr(row_order, "RowGather", gather_class)
    return str(request.param)


def snapshot(columns: Columns) -> tuple[Any, ...]:
    return tuple(getattr(columns, name) for name in Columns.__slots__)


def sorted_both_ways(
    batches: list[pa.RecordBatch],
    plan: dict[str, int],
    directory: Path,
    order: tuple[int, ...] = (),
    memory: int = 1 << 30,
) -> tuple[list[pa.RecordBatch], list[tuple[Any, ...]], int]:
    """The batches of ``sorted_batches``, the chunks of ``sorted_columns`` (checked equal to
    ``Columns`` of those batches) and the number of runs the sort spilled."""
    chunks = []
    for method in ("sorted_batches", "sorted_columns"):
        sorter = ArrowSorter(plan, order, memory, str(directory))
        try:
            for batch in batches:
                sorter.add(batch)
            out = list(getattr(sorter, method)())
            runs = len(sorter.runs)
        finally:
            sorter.close()
        if method == "sorted_batches":
            merged = out
            out = [Columns(batch, plan) for batch in out]
        chunks.append([snapshot(columns) for columns in out])
    assert chunks[1] == chunks[0]
    return merged, chunks[1], runs


def both_ways(
    batches: list[pa.RecordBatch],
    plan: dict[str, int],
    directory: Path,
    order: tuple[int, ...] = (),
    memory: int = 1 << 30,
) -> list[tuple[Any, ...]]:
    """The chunks of ``sorted_columns``, checked equal to ``Columns`` of ``sorted_batches``."""
    return sorted_both_ways(batches, plan, directory, order, memory)[1]


def values_of(count: int, seed: int, sizes: tuple[int, ...] = (100,)) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice(sizes)) for _ in range(count)]


def test_radix_path_chunks_equal_across_input_and_output_chunks(
    tmp_path: Path, gather: str
) -> None:
    """Distinct 100-byte values in many input batches: more than one output chunk, every
    row's size known once for the whole task (``uniform``)."""
    values = values_of(20_000, 1)
    table = pa.table({"value": pa.array(values, pa.binary())})
    chunks = both_ways(table.to_batches(max_chunksize=3000), {"value": 0}, tmp_path)
    assert len(chunks) == 3  # 8192-row chunks
    assert [c[Columns.__slots__.index("uniform")] for c in chunks] == [100 + RECORD_OVERHEAD] * 3
    sent = [v for c in chunks for v in c[Columns.__slots__.index("values")]]
    assert sorted(sent) == sorted(values)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()])
def test_radix_path_of_any_value_layout_with_other_roles(
    tmp_path: Path, gather: str, kind: pa.DataType
) -> None:
    """Values of several lengths (sizes listed per row), as any binary or string layout, a
    slice of a larger array, with a key and properties gathered by Arrow beside them."""
    count = 3000
    values = [v.hex().encode() for v in values_of(count + 7, 2, (0, 3, 40))]
    value = pa.array(values, pa.binary()).cast(kind).slice(7)
    key = pa.array([f"k{i % 11}" if i % 5 else None for i in range(count)])
    props = pa.array(
        [[("i", str(i))] if i % 3 else None for i in range(count)],
        pa.map_(pa.string(), pa.string()),
    )
    batch = pa.RecordBatch.from_arrays([key, value, props], names=["key", "value", "properties"])
    plan = {"value": 1, "key": 0, "properties": 2}
    both_ways([batch.slice(0, 1000), batch.slice(1000)], plan, tmp_path)
    both_ways([batch], {"value": 1, "key": 0}, tmp_path)  # sizes by Arrow, no properties


def test_general_sort_and_spilled_runs(tmp_path: Path, gather: str) -> None:
    """Ties, null values, ordering columns, every role: the general sort's order gathered
    alike; spilled runs (a run per batch) merge to chunks equal too."""
    rows = make_rows()
    random.Random(3).shuffle(rows)
    batches = batches_of(rows, 9)
    for order in ((), ORDER_F, (7, 6)):
        in_memory = both_ways(batches, PLAN, tmp_path, order)
        assert both_ways(batches, PLAN, tmp_path, order, memory=1) == in_memory


def test_nothing_added_gives_no_chunk(tmp_path: Path, gather: str) -> None:
    assert both_ways([], {"value": 0}, tmp_path) == []
