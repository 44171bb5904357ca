"""row_order: one sequence for one set of rows, whatever the arrival order; spilled runs merge
to the in-memory order (real temporary files)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_connector.row_order import ArrowSorter

PLAN = {"value": 0, "key": 1, "topic": 2, "partition": 3, "eventTime": 4, "properties": 5}
SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("eventTime", pa.timestamp("us", tz="UTC")),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("f", pa.float64()),
        ("tags", pa.list_(pa.string())),
    ]
)
ORDER_F = (6,)


def make_rows() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = [
        (f"v{i % 7}".encode(), f"k{i % 3}", None, None, 1000 + i % 2, [("i", str(i % 5))],
         float(i % 4), [str(i % 2)])
        for i in range(60)
    ]  # fmt: skip
    rows += [(None, None, "t", 1, None, None, None, None), (b"", "", None, 0, None, [], 0.0, [])]
    rows += [(b"x", None, None, None, None, None, float("nan"), ["a", "b"])] * 3
    rows += [(b"x", None, None, None, None, [("b", "2"), ("a", "1")], -1.0, None)]
    return rows


def batches_of(rows: list[tuple[Any, ...]], size: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        columns = [list(column) for column in zip(*chunk, strict=True)]
        out.append(pa.RecordBatch.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)], schema=SCHEMA
        ))  # fmt: skip
    return out


def sort_all(
    rows: list[tuple[Any, ...]], memory: int, directory: Path, order: tuple[int, ...] = ()
) -> tuple[list[str], int]:
    """The sorted rows as text (NaN != NaN, so rows are compared as text) and the run count."""
    out, runs = sort_rows(rows, memory, directory, order)
    return [repr(row) for row in out], runs


def sort_rows(
    rows: list[tuple[Any, ...]], memory: int, directory: Path, order: tuple[int, ...] = ()
) -> tuple[list[dict[str, Any]], int]:
    sorter = ArrowSorter(PLAN, order, memory, str(directory))
    try:
        for batch in batches_of(rows, 9):
            sorter.add(batch)
        runs = len(sorter.runs)
        out = list(sorter.sorted_batches())
        assert all(batch.schema == SCHEMA for batch in out)  # the sort keys are not sent on
        return [row for batch in out for row in batch.to_pylist()], runs
    finally:
        sorter.close()


def test_any_arrival_order_gives_one_sequence(tmp_path: Path) -> None:
    rows = make_rows()
    expected, runs = sort_all(rows, 1 << 30, tmp_path)
    assert runs == 0
    assert len(expected) == len(rows)
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert sort_all(shuffled, 1 << 30, tmp_path)[0] == expected


def test_spilled_runs_merge_to_the_in_memory_sequence(tmp_path: Path) -> None:
    rows = make_rows()
    for order in ((), ORDER_F, (7, 6)):  # no ordering column, a float one, a nested one first
        expected, _ = sort_all(rows, 1 << 30, tmp_path, order)
        for seed in range(3):
            shuffled = rows[:]
            random.Random(seed).shuffle(shuffled)
            spilled, runs = sort_all(shuffled, 1, tmp_path, order)  # a run per batch
            assert runs == 8
            assert spilled == expected
    # The runs are anonymous temporary files: nothing is left in the directory.
    assert list(tmp_path.iterdir()) == []


def test_ordering_columns_come_first_then_content(tmp_path: Path) -> None:
    rows = make_rows()
    ordered, _ = sort_rows(rows, 1 << 30, tmp_path, ORDER_F)
    floats = [row["f"] for row in ordered]
    # Nulls first, then NaN, then numbers ascending (Arrow's order, kept by the merge).
    assert floats[0] is None
    assert all(f != f for f in floats[1:4])
    assert floats[4:] == sorted(floats[4:])
    # Rows differing only in what they send are ordered by it (no arrival-order tie).
    by_content, _ = sort_rows(rows, 1 << 30, tmp_path)
    assert by_content[0]["value"] is None  # a null value first
    values = [row["value"] for row in by_content[1:]]
    assert values == sorted(values)


def test_properties_order_is_not_data(tmp_path: Path) -> None:
    """A map with the same pairs in another order is the same properties: same place."""
    a = [(b"v", None, None, None, None, [("a", "1"), ("b", "2")], 0.0, None)]
    b = [(b"v", None, None, None, None, [("b", "2"), ("a", "1")], 0.0, None)]
    c = [(b"v", None, None, None, None, [("a", "0")], 0.0, None)]
    left, _ = sort_all(a + c, 1 << 30, tmp_path)
    right, _ = sort_all(c + b, 1 << 30, tmp_path)
    assert [
        text.replace("('b', '2'), ('a', '1')", "('a', '1'), ('b', '2')") for text in right
    ] == left
