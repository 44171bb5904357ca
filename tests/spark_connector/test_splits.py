"""minPartitions: ranges split at entry boundaries, from the positions alone (pure)."""

from __future__ import annotations

from spark_connector.positions import EARLIEST, Position
from spark_connector.splits import split_ranges


def test_no_split_when_enough_ranges() -> None:
    ranges = [("t", 0, Position(1, 0, 0), Position(1, 9, 0))]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 1) == ranges


def test_split_in_proportion_to_size() -> None:
    ranges = [
        ("t", 0, Position(1, 0, 0), Position(1, 9, 1)),  # 10 entries
        ("t", 1, Position(1, 3, 2), Position(1, 5, 0)),  # 2 entries
    ]
    pieces = split_ranges(ranges, 4)
    assert pieces == [
        ("t", 0, Position(1, 0, 0), Position(1, 3, 0)),
        ("t", 0, Position(1, 3, 0), Position(1, 6, 0)),
        ("t", 0, Position(1, 6, 0), Position(1, 9, 1)),
        ("t", 1, Position(1, 3, 2), Position(1, 5, 0)),
    ]
    # Never more pieces than entries.
    one = [("t", 0, Position(1, 0, 0), Position(1, 1, 0))]
    assert split_ranges(one, 5) == one


def test_a_range_over_ledgers_splits_its_last_ledger() -> None:
    ranges = [("t", 0, EARLIEST, Position(4, 3, 1))]
    assert split_ranges(ranges, 3) == [
        ("t", 0, EARLIEST, Position(4, 1, 0)),
        ("t", 0, Position(4, 1, 0), Position(4, 2, 0)),
        ("t", 0, Position(4, 2, 0), Position(4, 3, 1)),
    ]
