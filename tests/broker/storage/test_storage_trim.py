"""Trimming: never a segment a durable cursor still needs, never the active one; retention."""

from __future__ import annotations

import shutil
from pathlib import Path

from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.position import BEFORE_EVERYTHING
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

T0 = 1_000_000.0  # seconds; the ledger clock during writes


def _open(directory: Path, **overrides: int) -> Ledger:
    config = LedgerConfig(max_entries_per_ledger=3, preallocate_bytes=0, **overrides)  # type: ignore[arg-type]
    return Ledger.open(
        directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor(), clock=lambda: T0
    )


def _fill(ledger: Ledger, count: int) -> list[Position]:
    positions = [ledger.append(b"x" * 100) for _ in range(count)]
    ledger.flush()
    return positions


def _segment_ids(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.seg"))


def test_trim_waits_for_the_persisted_mark_delete_of_every_durable_cursor(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t")
    p = _fill(ledger, 10)  # ledgers 1,2,3 sealed when 4 starts; 4 active
    slow = ledger.open_cursor("slow", InitialPosition.Earliest)
    fast = ledger.open_cursor("fast", InitialPosition.Earliest)
    assert ledger.trim(now=T0) == 0
    fast.mark_delete(p[9])
    fast.persist()
    slow.mark_delete(p[4])  # in memory only
    assert ledger.trim(now=T0) == 0  # trimming trusts only persisted state
    slow.persist()
    assert ledger.trim(now=T0) == 1  # ledger 1 (entries 0..2); ledger 2 still holds p[5]
    assert _segment_ids(tmp_path / "t") == [2, 3, 4]
    slow.mark_delete(p[5])
    slow.persist()
    assert ledger.trim(now=T0) == 1
    slow.mark_delete(p[9])
    slow.persist()
    assert ledger.trim(now=T0) == 1  # ledger 3; the active ledger 4 is never trimmed
    assert _segment_ids(tmp_path / "t") == [4]
    assert ledger.first_position == p[9]
    # A read inside a trimmed segment resolves to the first entry still stored.
    assert [pos for pos, _ in ledger.read(p[0], 10)] == [p[9]]
    ledger.close()


def test_no_durable_cursor_means_everything_sealed_may_go(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t")
    p = _fill(ledger, 7)
    reader = ledger.new_non_durable_cursor(p[0])  # readers do not hold data back
    assert ledger.trim(now=T0) == 2
    assert [pos for pos, _ in reader.read_entries(10, 1 << 20)] == [p[6]]
    ledger.close()
    # Everything trimmed and reopened: the last position is still known, ids never repeat.
    reopened = _open(tmp_path / "t")
    assert reopened.trim(now=T0) == 1  # ledger 3 became sealed by close
    assert _segment_ids(tmp_path / "t") == []
    reopened.close()
    again = _open(tmp_path / "t")
    assert again.last_confirmed_position == p[6]
    assert again.first_position is None
    assert again.append(b"y").ledger_id > p[6].ledger_id
    latest = again.open_cursor("late")
    assert latest.mark_delete_position == p[6]
    again.close()


def test_time_retention_keeps_consumed_segments_until_they_expire(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", retention_time_minutes=10, retention_size_mb=-1)
    _fill(ledger, 7)
    assert ledger.trim(now=T0 + 9 * 60) == 0
    assert ledger.trim(now=T0 + 10 * 60) == 2
    ledger.close()


def test_size_retention_deletes_oldest_consumed_until_under_quota(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    config = LedgerConfig(
        max_entries_per_ledger=1000,
        max_size_per_ledger_bytes=300_000,
        preallocate_bytes=0,
        retention_time_minutes=-1,
        retention_size_mb=1,
    )
    ledger = Ledger.open(directory, config, file_layer=NoSyncLayer(), clock=lambda: T0)
    for _ in range(12):
        ledger.append(b"z" * 100_000)  # 2 entries per 300 kB segment: 6 segments, 1.2 MB
    ledger.flush()
    ledger.append(b"tail")
    ledger.flush()
    assert ledger.trim(now=T0 + 10**9) == 1  # 1.2 MB -> 1.0 MB is not over 1 MiB
    assert ledger.stats()["stored_bytes"] <= 1024 * 1024
    ledger.close()


def test_infinite_retention_never_trims(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", retention_time_minutes=-1, retention_size_mb=-1)
    _fill(ledger, 9)
    assert ledger.trim(now=T0 + 10**9) == 0
    ledger.close()


def test_an_interrupted_trim_does_not_resurrect_the_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    ledger = _open(directory)
    _fill(ledger, 7)
    backup = tmp_path / "seg1"
    shutil.copy(directory / f"{1:020d}.seg", backup)
    assert ledger.trim(now=T0) == 2
    ledger.close()
    shutil.copy(backup, directory / f"{1:020d}.seg")  # as if the unlink never happened
    reopened = _open(directory)
    assert 1 not in _segment_ids(directory)
    assert [pos.ledger_id for pos, _ in reopened.iter_entries(BEFORE_EVERYTHING)] == [3]
    reopened.close()


def test_trim_survives_reopen_and_cursor_positions_stay_valid(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    ledger = _open(directory)
    p = _fill(ledger, 8)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    cursor.mark_delete(p[5])
    ledger.close()
    reopened = _open(directory)
    assert reopened.trim(now=T0) == 2
    restored = reopened.cursors["c"]
    assert restored.backlog() == 2
    assert [pos for pos, _ in restored.read_entries(10, 1 << 20)] == p[6:]
    reopened.close()


def test_trim_due_answers_what_trim_would_do_without_touching_a_file(tmp_path: Path) -> None:
    """The housekeeping asks ``trim_due`` on the event loop and hops to a disk thread only
    when it is true: it must agree with ``trim``."""
    ledger = _open(tmp_path / "t")
    p = _fill(ledger, 10)
    cursor = ledger.open_cursor("sub", InitialPosition.Earliest)
    assert not ledger.trim_due(now=T0)
    cursor.mark_delete(p[4])
    assert not ledger.trim_due(now=T0)  # trimming trusts only persisted state
    assert cursor.wants_persist(now=0.0)
    cursor.persist()
    assert not cursor.wants_persist(now=0.0)
    assert ledger.trim_due(now=T0)
    assert ledger.trim(now=T0) == 1
    assert not ledger.trim_due(now=T0)
    ledger.close()
    assert not ledger.trim_due(now=T0)  # closed: nothing to do
