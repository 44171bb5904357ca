"""row_order: one sequence for one set of rows, whatever the arrival order; spilled runs merge
to the in-memory order (real temporary files)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa

from protocol.row_hash import row_hash64
from spark_connector.row_order import ArrowSorter, value_hashes

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
    # Rows differing only in what they send are ordered by it (no arrival-order tie): the
    # hash of the value first, then the value's bytes, then the rest of the content.
    by_content, _ = sort_rows(rows, 1 << 30, tmp_path)
    assert by_content[0]["value"] is None  # a null value first
    values = [row["value"] for row in by_content[1:]]
    assert values == sorted(values, key=lambda v: (row_hash64(v), v))
    same_value = [row["key"] for row in by_content if row["value"] == b"v1"]
    assert same_value == sorted(same_value)  # equal values: their keys decide


def test_the_order_of_values_is_pinned(tmp_path: Path) -> None:
    """The numbering of a set of rows never changes between builds (a retried task of a new
    build must number rows as the failed attempt of an old one did): pinned here."""
    values = [b"", b"a", b"v0", b"v1", b"v2", b"abcdefgh", b"abcdefghi", b"x" * 100]
    rows = [(v, None, None, None, None, None, None, None) for v in reversed(values)]
    ordered, _ = sort_rows(rows, 1 << 30, tmp_path)
    assert [row["value"] for row in ordered] == [
        b"v1",
        b"abcdefgh",
        b"abcdefghi",
        b"v2",
        b"a",
        b"v0",
        b"x" * 100,
        b"",
    ]


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


def hashed(array: pa.Array) -> list[int | None]:
    hashes = value_hashes(array)
    assert hashes is not None
    assert hashes.type == pa.uint64()
    values: list[int | None] = hashes.to_pylist()
    return values


def test_value_hashes_of_any_binary_layout() -> None:
    """Strings, large binaries and slices (an Arrow offset) hash as their bytes; null stays
    null (it sorts first, as the value's bytes would)."""
    values = [b"a", None, b"", b"xyz" * 30, b"v1"]
    expected = [None if v is None else row_hash64(v) for v in values]
    plain = pa.array(values, pa.binary())
    assert hashed(plain) == expected
    assert hashed(plain.cast(pa.large_binary())) == expected
    assert hashed(pa.array([None if v is None else v.decode() for v in values])) == expected
    assert hashed(plain.slice(1, 3)) == expected[1:4]
    assert hashed(pa.array([], pa.binary())) == []
    assert value_hashes(pa.array([1, 2])) is None  # no hash key for other types


def test_the_radix_path_orders_as_the_general_sort(tmp_path: Path) -> None:
    """Distinct hashes: ordered by the hash alone (the radix sort), the order every key gives;
    a repeated value (a tie) goes to the general sort, which still orders by the key."""
    rng = random.Random(5)
    distinct = [(b"r%d" % rng.randrange(10**9), f"k{i}") for i in range(500)]
    for rows in (distinct, [*distinct, (distinct[0][0], "a-second-key")]):
        table = pa.table(
            {
                "value": pa.array([v for v, _ in rows], pa.binary()),
                "key": pa.array([k for _, k in rows]),
            }
        )
        sorter = ArrowSorter({"value": 0, "key": 1}, (), 1 << 30, str(tmp_path))
        for batch in table.to_batches(max_chunksize=64):
            sorter.add(batch)
        out = pa.Table.from_batches(list(sorter.sorted_batches()))
        expected = sorted(rows, key=lambda r: (row_hash64(r[0]), r[0], r[1].encode()))
        assert list(zip(out["value"].to_pylist(), out["key"].to_pylist(), strict=True)) == expected
