"""A task's row order depends only on its multiset of rows, in memory and when spilled (no JVM)."""

from __future__ import annotations

import random
from pathlib import Path

from spark_connector.row_order import RowSorter, sort_key
from spark_connector.rows import SinkRow


def make_rows() -> list[SinkRow]:
    rows = [
        SinkRow(f"v{i % 7}".encode(), f"k{i % 3}", None, None, 1000 + i % 2, {"i": str(i % 5)})
        for i in range(300)
    ]
    rows += [SinkRow(None, None, "t", 1, None, None), SinkRow(b"", "", None, 0, None, {})]
    rows += [SinkRow(b"x", None, None, None, None, None, order=(float("nan"), None))] * 3
    return rows


def sort_all(rows: list[SinkRow], memory_bytes: int, directory: Path) -> tuple[list[SinkRow], int]:
    sorter = RowSorter(memory_bytes, str(directory))
    try:
        for row in rows:
            sorter.add(row, len(row.value or b""))
        runs = len(sorter.runs)
        return list(sorter.sorted_rows()), runs
    finally:
        sorter.close()


def test_any_arrival_order_gives_one_sequence(tmp_path: Path) -> None:
    rows = make_rows()
    expected, runs = sort_all(rows, 1 << 30, tmp_path)
    assert runs == 0
    assert sorted(expected, key=repr) == sorted(rows, key=repr)  # the same multiset
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert [repr(r) for r in sort_all(shuffled, 1 << 30, tmp_path)[0]] == [
            repr(r) for r in expected
        ]


def test_spilled_runs_merge_to_the_same_sequence(tmp_path: Path) -> None:
    rows = make_rows()
    expected, _ = sort_all(rows, 1 << 30, tmp_path)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    spilled, runs = sort_all(shuffled, 4096, tmp_path)  # ~14 rows per run
    assert runs > 10
    assert [repr(r) for r in spilled] == [repr(r) for r in expected]  # NaN != NaN
    # The runs are anonymous temporary files: nothing is left in the directory.
    assert list(tmp_path.iterdir()) == []


def test_ordering_columns_come_first_then_content() -> None:
    late = SinkRow(b"a", None, None, None, None, None, order=("t", 0, 9))
    early = SinkRow(b"z", None, None, None, None, None, order=("t", 0, 2))
    null_first = SinkRow(b"z", None, None, None, None, None, order=("t", None, 5))
    assert sorted([late, early, null_first], key=sort_key) == [null_first, early, late]
    # Rows differing only in what they send are ordered by it (no arrival-order tie).
    a = SinkRow(b"v", "k", None, None, 1, {"p": "1"})
    b = SinkRow(b"v", "k", None, None, 1, {"p": "2"})
    assert sort_key(a) < sort_key(b)
