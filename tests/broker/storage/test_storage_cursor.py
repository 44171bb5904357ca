"""Cursor semantics (unit) and a hypothesis state machine against a simple model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.storage import (
    CorruptCursorError,
    Cursor,
    InvalidPositionError,
    Ledger,
    LedgerClosedError,
    LedgerConfig,
    Position,
)
from broker.storage import cursor as cursor_module
from broker.storage.cursor_file import decode_cursor_state
from broker.storage.files import read_file
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

CONFIG = LedgerConfig(max_entries_per_ledger=4, preallocate_bytes=0)


def _open(directory: Path, config: LedgerConfig = CONFIG) -> Ledger:
    return Ledger.open(directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


def _filled(
    directory: Path, count: int, config: LedgerConfig = CONFIG
) -> tuple[Ledger, list[Position]]:
    ledger = _open(directory, config)
    positions = [ledger.append(f"e{i}".encode()) for i in range(count)]
    ledger.flush()
    return ledger, positions


def test_new_cursor_positions(tmp_path: Path) -> None:
    ledger, positions = _filled(tmp_path / "t", 6)
    earliest = ledger.open_cursor("a", InitialPosition.Earliest)
    latest = ledger.open_cursor("b")
    assert earliest.mark_delete_position == Position(1, -1)
    assert earliest.read_position == positions[0]
    assert earliest.backlog() == 6
    assert latest.mark_delete_position == positions[-1]
    assert latest.backlog() == 0
    assert ledger.open_cursor("a") is earliest
    assert set(ledger.cursors) == {"a", "b"}
    ledger.close()


def test_individual_acks_advance_mark_delete_only_when_the_gap_closes(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 10)  # ledgers 1 (0..3), 2 (0..3), 3 (0..1)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete([p[1], p[2], p[3], p[4], p[6]])
    assert cursor.mark_delete_position == Position(1, -1)
    assert cursor.backlog() == 5
    assert cursor.individually_deleted() == [(p[1], p[3]), (p[4], p[4]), (p[6], p[6])]
    cursor.delete([p[0]])  # closes the gap, across the ledger boundary too
    assert cursor.mark_delete_position == p[4]
    assert cursor.individually_deleted() == [(p[6], p[6])]
    assert cursor.backlog() == 4
    assert cursor.is_deleted(p[6])
    assert not cursor.is_deleted(p[5])
    ledger.close()


def test_an_ack_group_naming_ids_never_stored_acks_only_the_stored_ones(tmp_path: Path) -> None:
    """One ACK may mix stored ids with ids past a ledger's end or in no ledger at all: the
    stored ones are acknowledged, the rest ignored, as one id at a time would."""
    ledger, p = _filled(tmp_path / "t", 10)  # ledgers 1 (0..3), 2 (0..3), 3 (0..1)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete([Position(2, 1), Position(2, 2), Position(2, 7)])  # 2:7 was never written
    assert cursor.individually_deleted() == [(p[5], p[6])]
    cursor.delete([Position(9, 0), Position(9, 1)])  # no ledger 9
    cursor.delete([Position(3, -1), Position(3, 1)])  # no entry -1
    assert cursor.individually_deleted() == [(p[5], p[6]), (p[9], p[9])]
    cursor.delete([Position(1, 3), Position(1, 0), Position(1, 2), Position(1, 1)])
    assert cursor.mark_delete_position == p[3]
    cursor.delete([Position(2, 0), Position(2, 3)])
    assert cursor.mark_delete_position == p[7]
    assert cursor.backlog() == 1
    ledger.close()


def test_mark_delete_rules(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 6)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete([p[3]])
    cursor.mark_delete(p[2], {"seq": 5})
    assert cursor.mark_delete_position == p[3]  # joined the deleted range after it
    assert cursor.properties == {"seq": 5}
    cursor.mark_delete(p[1], {"seq": 1})  # older: ignored entirely
    assert (cursor.mark_delete_position, cursor.properties) == (p[3], {"seq": 5})
    cursor.mark_delete(p[3], {"seq": 6})  # same position: updates the properties
    assert cursor.properties == {"seq": 6}
    with pytest.raises(InvalidPositionError):
        cursor.mark_delete(Position(9, 0))
    cursor.mark_delete(p[4])
    assert cursor.properties == {}
    cursor.delete([p[5]])  # moved by an individual ack: properties cleared (as Pulsar)
    assert cursor.mark_delete_position == p[5]
    assert cursor.backlog() == 0
    ledger.close()


def test_batch_index_acks_and_never_roll_back(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 3)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete_batch_indexes(p[1], [0b1110])  # index 0 acked
    cursor.delete_batch_indexes(p[1], [0b1101])  # index 1 acked
    assert cursor.batch_ack_set(p[1]) == [0b1100]
    cursor.delete_batch_indexes(p[1], [0b1111])  # a stale, older set: no resurrection
    assert cursor.batch_ack_set(p[1]) == [0b1100]
    assert not cursor.is_deleted(p[1])
    cursor.delete_batch_indexes(p[1], [0b0011])  # AND gives zero: the entry is deleted
    assert cursor.is_deleted(p[1])
    assert cursor.batch_ack_set(p[1]) is None
    cursor.delete_batch_indexes(p[1], [0b1])  # already deleted: ignored
    assert cursor.batch_ack_set(p[1]) is None
    # Words beyond the shorter set count as zero (java.util.BitSet.and).
    cursor.delete_batch_indexes(p[2], [0b1, 0b1])
    cursor.delete_batch_indexes(p[2], [0b1])
    assert cursor.batch_ack_set(p[2]) == [0b1]
    cursor.mark_delete(p[2])  # cumulative past it drops the partial state
    assert cursor.batch_ack_set(p[2]) is None
    ledger.close()


def test_read_entries_skips_deleted_and_seek_rewind_reset(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 8)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete([p[1], p[2]])
    got = cursor.read_entries(3, 1 << 20)
    assert [pos for pos, _ in got] == [p[0], p[3], p[4]]
    assert cursor.read_position == p[5]
    assert [pos for pos, _ in cursor.read_entries(10, 1 << 20)] == p[5:]
    assert cursor.read_entries(10, 1 << 20) == []
    assert not cursor.has_more_entries()
    cursor.rewind()
    assert cursor.read_position == p[0]
    cursor.seek(p[6])
    assert [pos for pos, _ in cursor.read_entries(10, 1 << 20)] == p[6:]
    cursor.reset(p[5])
    assert cursor.mark_delete_position == Position(p[5].ledger_id, p[5].entry_id - 1)
    assert cursor.individually_deleted() == []
    assert cursor.backlog() == 3
    assert [pos for pos, _ in cursor.read_entries(1, 1)] == [p[5]]  # max_bytes: at least one
    ledger.close()


def test_persist_restores_exactly_and_maybe_persist_is_rate_limited(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 10)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    assert not cursor.dirty
    cursor.mark_delete(p[1], {"producer-a": 41})
    cursor.delete([p[3], p[5], p[6]])
    cursor.delete_batch_indexes(p[8], [-2])  # a Java long with the sign bit set
    assert cursor.maybe_persist(now=100.0)
    cursor.delete([p[9]])
    assert not cursor.maybe_persist(now=100.5)  # interval 1 s not elapsed
    assert cursor.maybe_persist(now=101.0)
    assert not cursor.maybe_persist(now=500.0)  # nothing new
    expected = cursor.snapshot()
    ledger._abandon()
    reopened = _open(tmp_path / "t")
    restored = reopened.cursors["c"]
    assert restored.snapshot() == expected
    assert restored.batch_ack_set(p[8]) == [-2]
    assert restored.persisted_mark_delete_position == p[1]
    reopened.close()


def test_unpersisted_state_is_lost_on_crash_but_close_persists(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 5)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.mark_delete(p[2])
    ledger._abandon()
    reopened = _open(tmp_path / "t")
    assert reopened.cursors["c"].mark_delete_position == Position(1, -1)
    reopened.cursors["c"].mark_delete(p[2])
    reopened.close()
    again = _open(tmp_path / "t")
    assert again.cursors["c"].mark_delete_position == p[2]
    again.close()


def test_persisted_state_is_bounded(tmp_path: Path) -> None:
    config = LedgerConfig(
        max_entries_per_ledger=100,
        preallocate_bytes=0,
        max_unacked_ranges_to_persist=2,
        max_batch_deleted_index_to_persist=1,
    )
    ledger, p = _filled(tmp_path / "t", 20, config)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.delete([p[2], p[4], p[6]])
    cursor.delete_batch_indexes(p[10], [0b10])
    cursor.delete_batch_indexes(p[11], [0b10])
    cursor.persist()
    state = decode_cursor_state(read_file(ledger._cursors.path_of("c")), Path("c"))
    assert [r.first for r in state.ranges] == [p[2], p[4]]  # the lowest ones are kept
    assert list(state.batch) == [p[10]]
    ledger.close()
    reopened = _open(tmp_path / "t", config)
    restored = reopened.cursors["c"]
    # Beyond the bound: redelivered after a restart (at-least-once), never lost.
    assert not restored.is_deleted(p[6])
    assert restored.batch_ack_set(p[11]) is None
    reopened.close()


def test_delete_cursor_is_durable(tmp_path: Path) -> None:
    ledger, _ = _filled(tmp_path / "t", 2)
    cursor = ledger.open_cursor("pulsar.dedup")
    ledger.delete_cursor("pulsar.dedup")
    with pytest.raises(LedgerClosedError):
        cursor.mark_delete(Position(1, 0))
    assert "pulsar.dedup" not in ledger.cursors
    ledger.close()
    assert list((tmp_path / "t" / "cursors").glob("*.cursor")) == []
    reopened = _open(tmp_path / "t")
    assert dict(reopened.cursors) == {}
    reopened.close()


def test_odd_cursor_names_round_trip(tmp_path: Path) -> None:
    names = ["a/b", "..", "ünïcode sub", "x" * 300, "%2F"]
    ledger, _ = _filled(tmp_path / "t", 1)
    for name in names:
        ledger.open_cursor(name)
    ledger.close()
    reopened = _open(tmp_path / "t")
    assert sorted(reopened.cursors) == sorted(names)
    reopened.close()


def test_a_cursor_file_renamed_to_another_name_is_rejected(tmp_path: Path) -> None:
    ledger, _ = _filled(tmp_path / "t", 1)
    ledger.open_cursor("a")
    ledger.close()
    cursors = tmp_path / "t" / "cursors"
    (cursors / "a.cursor").rename(cursors / "b.cursor")
    with pytest.raises(CorruptCursorError, match="holds cursor 'a'"):
        _open(tmp_path / "t")


def test_non_durable_cursor_lives_in_memory_only(tmp_path: Path) -> None:
    ledger, p = _filled(tmp_path / "t", 6)
    reader = ledger.new_non_durable_cursor(p[2])
    assert not reader.durable
    assert reader.read_position == p[2]
    assert [pos for pos, _ in reader.read_entries(2, 1 << 20)] == p[2:4]
    reader.mark_delete(p[4])
    reader.persist()  # a no-op
    assert ledger.cursors == {}
    assert list((tmp_path / "t" / "cursors").glob("*.cursor")) == []
    ledger.close()


def test_cursor_beyond_the_recovered_end_is_clamped(tmp_path: Path) -> None:
    """With sync_data=False a power loss can keep cursor state but lose data."""
    ledger, p = _filled(
        tmp_path / "t", 3, LedgerConfig(max_entries_per_ledger=100, preallocate_bytes=0)
    )
    cursor = ledger.open_cursor("pulsar.dedup", InitialPosition.Earliest)
    cursor.mark_delete(p[2], {"producer": 9})
    cursor.persist()
    (segment,) = ledger.segment_paths()
    ledger._abandon()
    with open(segment, "r+b") as handle:
        handle.truncate(handle.seek(0, 2) - 3)  # the last record is torn
    reopened = _open(tmp_path / "t")
    restored = reopened.cursors["pulsar.dedup"]
    assert restored.was_clamped
    assert restored.mark_delete_position == p[1]
    assert restored.properties == {}  # the snapshot described data that is gone
    reopened.close()


def test_closed_ledger_rejects_operations(tmp_path: Path) -> None:
    ledger, _ = _filled(tmp_path / "t", 1)
    cursor: Cursor = ledger.open_cursor("c")
    ledger.close()
    ledger.close()  # idempotent
    with pytest.raises(LedgerClosedError):
        ledger.append(b"x")
    with pytest.raises(LedgerClosedError):
        cursor.delete([Position(1, 0)])


# ---------------------------------------------------------------- state machine


class CursorModel(RuleBasedStateMachine):
    """Random individual / cumulative / batch acks, persists, clean and crash reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="cursor-sm-"))
        self.ledger = _open(self.root)
        self.positions = [self.ledger.append(bytes([i])) for i in range(6)]
        self.ledger.flush()
        self.cursor = self.ledger.open_cursor("c", InitialPosition.Earliest)
        self.acked: set[int] = set()
        self.batch: dict[int, int] = {}
        self.props: dict[str, int] = {}
        self.saved = self._state()

    def _state(self) -> tuple[frozenset[int], dict[int, int], dict[str, int]]:
        return frozenset(self.acked), dict(self.batch), dict(self.props)

    def _md_index(self) -> int:
        index = -1
        while index + 1 in self.acked:
            index += 1
        return index

    def _ack(self, index: int) -> None:
        before = self._md_index()
        self.acked.add(index)
        self.batch.pop(index, None)
        if self._md_index() != before:
            self.props = {}

    def teardown(self) -> None:
        self.ledger._abandon()
        shutil.rmtree(self.root, ignore_errors=True)

    indexes = st.integers(min_value=0, max_value=40)

    @rule(index=indexes)
    def individual_ack(self, index: int) -> None:
        index %= len(self.positions)
        self.cursor.delete([self.positions[index]])
        if index > self._md_index():
            self._ack(index)

    @rule(index=indexes, value=st.integers(0, 99))
    def cumulative_ack(self, index: int, value: int) -> None:
        index %= len(self.positions)
        self.cursor.mark_delete(self.positions[index], {"v": value})
        if index >= self._md_index():
            self.acked.update(range(index + 1))
            self.batch = {i: w for i, w in self.batch.items() if i > index}
            self.props = {"v": value}

    @rule(index=indexes, word=st.integers(0, 15))
    def batch_ack(self, index: int, word: int) -> None:
        index %= len(self.positions)
        self.cursor.delete_batch_indexes(self.positions[index], [word])
        if index <= self._md_index() or index in self.acked:
            return
        merged = word if index not in self.batch else self.batch[index] & word
        if merged == 0:
            self._ack(index)
        else:
            self.batch[index] = merged

    @rule(count=st.integers(1, 5))
    def append_more(self, count: int) -> None:
        new = [self.ledger.append(b"m") for _ in range(count)]
        self.ledger.flush()
        self.positions.extend(new)

    @rule()
    def persist(self) -> None:
        self.cursor.persist()
        self.saved = self._state()

    @rule()
    def clean_reopen(self) -> None:
        self.ledger.close()
        self.saved = self._state()
        self._reopen()

    @rule()
    def crash_reopen(self) -> None:
        self.ledger._abandon()
        self.acked, self.batch, self.props = (
            set(self.saved[0]),
            dict(self.saved[1]),
            dict(self.saved[2]),
        )
        self._reopen()

    def _reopen(self) -> None:
        self.ledger = _open(self.root)
        self.cursor = self.ledger.cursors["c"]

    @precondition(lambda self: self.positions)
    @invariant()
    def matches_model(self) -> None:
        md = self._md_index()
        expected_md = self.positions[md] if md >= 0 else Position(1, -1)
        assert self.cursor.mark_delete_position == expected_md
        for index, position in enumerate(self.positions):
            assert self.cursor.is_deleted(position) == (index in self.acked)
            expected_set = [self.batch[index]] if index in self.batch else None
            assert self.cursor.batch_ack_set(position) == expected_set
        assert self.cursor.backlog() == len(self.positions) - len(self.acked)
        assert self.cursor.properties == self.props


CursorModel.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestCursorModel = CursorModel.TestCase


def _lazy_parts(cursor: Cursor) -> dict[str, bool]:
    """Which of the parts an unacked cursor must not hold it holds (True: made)."""
    return {
        "lock": cursor._lock is not None,
        "persist lock": cursor._persist_lock is not None,
        "range set": cursor._ranges is not cursor_module._NO_RANGES,
        "batch map": cursor._batch is not None,
        "properties": cursor._properties is not cursor_module._NO_PROPERTIES,
    }


NOTHING_MADE = dict.fromkeys(
    ("lock", "persist lock", "range set", "batch map", "properties"), False
)


def test_a_new_or_reloaded_cursor_without_acks_holds_no_lock_set_or_map(tmp_path: Path) -> None:
    """Issue #26: a loaded topic's cursors (dedup, idempotency) are created and persisted at
    load and mostly never acked; their locks, range set, batch map and properties are made by
    the first write, and the two share the ledger's store."""
    ledger, p = _filled(tmp_path / "t", 6)
    a = ledger.open_cursor("a", InitialPosition.Earliest)
    b = ledger.open_cursor("b")
    assert _lazy_parts(a) == _lazy_parts(b) == NOTHING_MADE
    assert a._store is b._store
    assert (tmp_path / "t" / "cursors").is_dir()
    # No Path of its own: the cursors folder and files are named from the ledger's when used.
    assert a._store is not None
    assert a._store._ledger_directory is ledger.directory
    a.delete([p[2]])
    assert _lazy_parts(a) == {**NOTHING_MADE, "lock": True, "range set": True}
    assert a.individually_deleted() == [(p[2], p[2])]
    a.delete_batch_indexes(p[4], [0b101])
    assert a.batch_ack_set(p[4]) == [0b101]
    assert _lazy_parts(a)["batch map"]
    a.mark_delete(p[0], {"k": 1})
    assert a.properties == {"k": 1}
    a.persist()
    assert _lazy_parts(a)["persist lock"]
    assert _lazy_parts(b) == NOTHING_MADE  # the shared empty ones were never written
    assert len(cursor_module._NO_RANGES) == 0
    assert dict(cursor_module._NO_PROPERTIES) == {}
    a.reset(p[1])  # back to the shared empty ones, the locks stay
    assert _lazy_parts(a) == {**NOTHING_MADE, "lock": True, "persist lock": True}
    assert (a.individually_deleted(), a.batch_ack_set(p[4]), a.properties) == ([], None, {})
    a.delete([p[3]])
    a.mark_delete(p[1], {"k": 2})
    ledger.close()

    reopened = _open(tmp_path / "t")
    again, other = reopened.cursors["a"], reopened.cursors["b"]
    assert again.individually_deleted() == [(p[3], p[3])]
    assert again.properties == {"k": 2}
    # Acks held: recovery checks them against the recovered end, under the lock.
    assert _lazy_parts(again) == {
        **NOTHING_MADE,
        "lock": True,
        "range set": True,
        "properties": True,
    }
    assert _lazy_parts(other) == NOTHING_MADE
    assert again.mark_delete_position == p[1]
    again.delete([p[2]])  # closes the gap: the mark-delete moves over both
    assert again.mark_delete_position == p[3]
    assert again.individually_deleted() == []
    assert again.properties == {}
    reopened.close()
