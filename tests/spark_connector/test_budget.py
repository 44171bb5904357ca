"""maxOffsetsPerTrigger's budget: entries from message ids, a fair split (pure)."""

from __future__ import annotations

from spark_connector.budget import cut, entries_between, estimate, fair_shares
from spark_connector.positions import Position


def test_entries_between_positions() -> None:
    assert entries_between(Position(3, 5, 0), Position(3, 9, 0), None) == 4
    # An end after a message counts its entry; a start inside an entry counts it.
    assert entries_between(Position(3, 5, 2), Position(3, 9, 4), None) == 5
    assert entries_between(Position(3, 9, 0), Position(3, 5, 0), None) == 0
    assert entries_between(Position(3, 5, 0), Position(7, 2, 0), None) is None
    ledgers = [(2, 10), (3, 8), (5, 0), (6, 4), (7, 9)]
    assert entries_between(Position(3, 5, 0), Position(7, 2, 0), ledgers) == 3 + 4 + 2
    assert estimate(Position(3, 5, 0), Position(7, 2, 0), None) == 3


def test_fair_shares_are_proportional_with_one_at_least() -> None:
    assert fair_shares(10, {"a": 40, "b": 20, "c": 6, "d": 1, "e": 0}) == {
        "a": 5,
        "b": 2,
        "c": 1,
        "d": 1,
        "e": 0,
    }
    assert fair_shares(100, {"a": 40, "b": 20}) == {"a": 40, "b": 20}
    assert fair_shares(1, {"a": 1, "b": 1}) == {"a": 1, "b": 1}


def test_cut_within_and_across_ledgers() -> None:
    end = Position(3, 9, 1)
    assert cut(Position(3, 5, 2), 3, end, None) == Position(3, 8, 0)
    assert cut(Position(3, 5, 2), 30, end, None) == end
    assert cut(Position(3, 5, 0), 0, end, None) == Position(3, 5, 0)
    far = Position(7, 2, 1)
    assert cut(Position(3, 5, 0), 2, far, None) is None
    ledgers = [(2, 10), (3, 8), (5, 0), (6, 4), (7, 9)]
    assert cut(Position(3, 5, 0), 2, far, ledgers) == Position(3, 7, 0)
    assert cut(Position(3, 5, 0), 3, far, ledgers) == Position(6, 0, 0)
    assert cut(Position(3, 5, 0), 8, far, ledgers) == Position(7, 1, 0)
    assert cut(Position(3, 5, 0), 50, far, ledgers) == far
