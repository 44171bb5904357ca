"""Positions and the packed ``offset`` column (pure, no JVM)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_connector.positions import EARLIEST, Position, PositionOutOfRange, pack, unpack

ledgers = st.integers(0, (1 << 23) - 1)
entries = st.integers(0, (1 << 24) - 1)
indexes = st.integers(-1, (1 << 16) - 1)


@settings(max_examples=100, deadline=None)  # no deadline: a loaded 2-core box
@given(ledgers, entries, indexes)
def test_pack_round_trips_to_the_message_position(ledger: int, entry: int, index: int) -> None:
    assert unpack(pack(ledger, entry, index)) == Position.of_message(ledger, entry, index)


@settings(max_examples=100, deadline=None)  # no deadline: a loaded 2-core box
@given(st.tuples(ledgers, entries, indexes), st.tuples(ledgers, entries, indexes))
def test_pack_is_monotonic_in_message_order(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    if Position.of_message(*a) < Position.of_message(*b):
        assert pack(*a) < pack(*b)


@pytest.mark.parametrize(
    ("ledger", "entry", "index"), [(1 << 23, 0, 0), (0, 1 << 24, 0), (0, 0, 1 << 16), (-1, 0, 0)]
)
def test_pack_refuses_what_does_not_fit(ledger: int, entry: int, index: int) -> None:
    with pytest.raises(PositionOutOfRange, match="does not fit"):
        pack(ledger, entry, index)


def test_after_a_message_is_the_next_index_of_its_entry() -> None:
    assert Position.after_message(3, 7, -1) == Position(3, 7, 1)  # not batched: past the entry
    assert Position.after_message(3, 7, 2) == Position(3, 7, 3)
    # Past an entry sorts before the next entry and before a later ledger.
    assert Position(3, 7, 4) < Position(3, 8, 0) < Position(4, 0, 0)
    assert Position(0, 0, 0) > EARLIEST


def test_json_form_is_canonical_and_parses_back() -> None:
    position = Position(2, 5, 1)
    assert list(position.to_json()) == ["b", "e", "l"]
    assert Position.from_json(position.to_json()) == position
    assert Position.from_json(pack(2, 5, 1)) == position
    assert Position.from_json({"l": -1, "e": -1, "b": 0}) == EARLIEST


@pytest.mark.parametrize("bad", [True, "3", {"l": 1, "e": 2}, {"l": 1, "e": -2, "b": 0}, -5])
def test_json_form_refuses_garbage(bad: object) -> None:
    with pytest.raises(ValueError):
        Position.from_json(bad)
