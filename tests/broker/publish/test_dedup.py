"""Tests for broker.publish.dedup: Pulsar's scenarios D1-D8, C4, T2, the R8 batch edges, and a
property test that snapshot + replay after a crash rebuilds exactly the persisted marks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.publish.dedup import (
    DedupConfig,
    DedupResult,
    DedupState,
    DedupStateError,
    MessageDeduplication,
    batch_highest_sequence_id,
)

NOT_DUP, DUP, UNKNOWN = DedupResult.NOT_DUP, DedupResult.DUP, DedupResult.UNKNOWN


class FakeLog:
    """Hands out increasing positions, like the ledger's (ledger_id, entry_id)."""

    def __init__(self) -> None:
        self.next_entry = 0

    def position(self) -> tuple[int, int]:
        self.next_entry += 1
        return (1, self.next_entry - 1)


def publish(
    dedup: MessageDeduplication[tuple[int, int]],
    log: FakeLog,
    name: str,
    seq: int,
    high: int | None = None,
) -> DedupResult:
    """check + (when new) a successful durable write, as the topic does it."""
    high = seq if high is None else high
    result = dedup.check(name, seq, high)
    if result is NOT_DUP:
        dedup.on_persisted(name, high, log.position())
    return result


@pytest.fixture
def dedup() -> MessageDeduplication[tuple[int, int]]:
    return MessageDeduplication()


@pytest.fixture
def log() -> FakeLog:
    return FakeLog()


# --------------------------------------------------------------------------- D1-D4: check()


def test_d1_new_ids_and_gaps_are_accepted(dedup: MessageDeduplication[tuple[int, int]]) -> None:
    assert dedup.check("p1", 0, 0) is NOT_DUP
    assert dedup.check("p2", 1, 1) is NOT_DUP
    assert dedup.check("p1", 1, 1) is NOT_DUP
    assert dedup.check("p1", 5, 5) is NOT_DUP  # a gap is fine
    assert dedup.highest_pushed == {"p1": 5, "p2": 1}
    assert dedup.highest_persisted == {}


def test_d2_resend_while_write_in_flight_is_unknown(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    assert dedup.check("p1", 0, 0) is NOT_DUP
    assert dedup.check("p1", 0, 0) is UNKNOWN
    assert dedup.highest_pushed == {"p1": 0}


def test_d3_resend_after_persist_is_dup(dedup: MessageDeduplication[tuple[int, int]]) -> None:
    assert dedup.check("p1", 0, 0) is NOT_DUP
    dedup.on_persisted("p1", 0, (1, 0))
    assert dedup.check("p1", 0, 0) is DUP


def test_d4_batch_range_moves_pushed_to_its_highest_id(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    assert publish(dedup, log, "p1", 0) is NOT_DUP
    assert dedup.check("p1", 1, 5) is NOT_DUP
    assert dedup.highest_pushed["p1"] == 5
    assert dedup.highest_persisted["p1"] == 0
    # 4..8 overlaps 1..5, still in flight: the broker cannot tell.
    assert dedup.check("p1", 4, 8) is UNKNOWN
    assert dedup.highest_pushed["p1"] == 5


def test_check_takes_the_larger_of_the_two_ids(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    """Java's max(highest, seq): an unset highest (0) never lowers the mark below seq."""
    assert dedup.check("p1", 7, 0) is NOT_DUP
    assert dedup.highest_pushed["p1"] == 7


# --------------------------------------------------------------------------- D5-D7: publish path


def test_d5_resend_of_persisted_id_is_dup_and_not_stored(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    for seq in (0, 1, 5):
        assert publish(dedup, log, "p1", seq) is NOT_DUP
    entries_before = log.next_entry
    assert publish(dedup, log, "p1", 0) is DUP
    assert log.next_entry == entries_before
    assert dedup.stats()["duplicates_dropped"] == 1


def test_d6_resend_of_in_flight_id_is_unknown_and_not_written(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    for seq in (0, 1, 5):
        publish(dedup, log, "p1", seq)
    assert dedup.check("p1", 6, 6) is NOT_DUP  # write of 6 not confirmed yet
    assert dedup.check("p1", 6, 6) is UNKNOWN
    assert dedup.stats()["unknown_answers"] == 1
    assert dedup.highest_persisted["p1"] == 5


def test_d7_write_failure_resets_pushed_for_all_producers(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    """Pulsar #5218: the retry of a failed write must be stored, not dropped as a dup."""
    for seq in (0, 1, 5, 6):
        publish(dedup, log, "p1", seq)
    publish(dedup, log, "p2", 3)
    assert dedup.check("p1", 7, 7) is NOT_DUP  # this write will fail
    assert dedup.check("p2", 4, 9) is NOT_DUP  # in flight behind it, fails too
    assert dedup.check("p3", 0, 0) is NOT_DUP  # never persisted at all

    dedup.on_write_failed()

    assert dedup.highest_pushed == {"p1": 6, "p2": 3}
    assert dedup.highest_pushed == dedup.highest_persisted
    assert dedup.check("p1", 6, 6) is DUP
    assert dedup.check("p1", 7, 7) is NOT_DUP  # the retry is accepted
    assert dedup.check("p2", 4, 9) is NOT_DUP
    assert dedup.check("p3", 0, 0) is NOT_DUP
    assert dedup.check("p1", 8, 8) is NOT_DUP


def test_persist_after_a_reset_keeps_pushed_at_or_above_persisted(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    """If the topic reports a write that the reset did not cover, pushed must follow."""
    dedup.check("p1", 0, 0)
    dedup.check("p1", 1, 1)
    dedup.on_write_failed()
    dedup.on_persisted("p1", 1, (1, 0))
    assert dedup.highest_pushed["p1"] == 1
    assert dedup.check("p1", 1, 1) is DUP


def test_persisted_mark_never_goes_back(dedup: MessageDeduplication[tuple[int, int]]) -> None:
    dedup.check("p1", 0, 9)
    dedup.on_persisted("p1", 9, (1, 0))
    dedup.on_persisted("p1", 4, (1, 1))
    assert dedup.highest_persisted["p1"] == 9
    assert dedup.last_persisted_position == (1, 1)


# --------------------------------------------------------------------------- C4, R8 edges


def test_c4_high_water_mark_drops_unseen_ids_below_it(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    stored = [seq for seq in (2, 3, 5, 2, 4, 6) if publish(dedup, log, "p1", seq) is NOT_DUP]
    assert stored == [2, 3, 5, 6]  # 4 was never stored but is below the mark 5
    assert dedup.last_sequence_id("p1") == 6


@pytest.mark.parametrize(
    ("persisted", "pushed", "batch", "expected"),
    [
        # the whole range at or below the persisted mark: a duplicate.
        (5, 5, (3, 5), DUP),
        (5, 5, (5, 5), DUP),
        (3, 5, (2, 3), DUP),  # even while later ids are in flight
        # straddling the persisted mark, nothing in flight: stored whole (R8, Pulsar #6273);
        # Java would answer DUP and lose 6..8.
        (5, 5, (4, 8), NOT_DUP),
        (5, 5, (5, 8), NOT_DUP),
        # overlapping ids still in flight: the broker cannot tell yet.
        (3, 5, (3, 8), UNKNOWN),
        (3, 5, (4, 8), UNKNOWN),
        (3, 5, (5, 5), UNKNOWN),
        # first id above the pushed mark: new, whatever the range.
        (3, 5, (6, 8), NOT_DUP),
        (5, 5, (6, 6), NOT_DUP),
        (5, 5, (9, 12), NOT_DUP),  # a gap
    ],
)
def test_r8_batch_against_the_marks(
    dedup: MessageDeduplication[tuple[int, int]],
    persisted: int,
    pushed: int,
    batch: tuple[int, int],
    expected: DedupResult,
) -> None:
    dedup.check("p1", 0, persisted)
    dedup.on_persisted("p1", persisted, (1, 0))
    if pushed > persisted:
        dedup.check("p1", persisted + 1, pushed)
    assert (dedup.highest_persisted["p1"], dedup.highest_pushed["p1"]) == (persisted, pushed)

    assert dedup.check("p1", *batch) is expected
    assert dedup.highest_pushed["p1"] == (batch[1] if expected is NOT_DUP else pushed)


def test_r8_straddling_batches_are_counted(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish(dedup, log, "p1", 0, 5)
    assert publish(dedup, log, "p1", 4, 8) is NOT_DUP
    assert publish(dedup, log, "p1", 9, 9) is NOT_DUP
    assert dedup.stats()["straddling_batches"] == 1
    assert dedup.last_sequence_id("p1") == 9


def test_may_be_duplicate_is_the_first_id_against_pushed(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    assert not dedup.may_be_duplicate("p1", 0)
    dedup.check("p1", 0, 3)
    assert dedup.may_be_duplicate("p1", 3)
    assert dedup.may_be_duplicate("p1", 0)
    assert not dedup.may_be_duplicate("p1", 4)
    assert not dedup.may_be_duplicate("p2", 0)


@pytest.mark.parametrize(
    ("seq", "highest", "num_messages", "expected"),
    [
        (0, None, 1, 0),  # single message
        (10, None, 5, 14),  # C++ batch: only the first id is on the wire
        (10, 20, 5, 20),  # Java batch: the highest id is stated
        (10, 0, 5, 10),  # a stated highest below the first id: Java's max()
        (10, None, 0, 10),  # num_messages absent/0 counts as one message
    ],
)
def test_batch_highest_sequence_id(
    seq: int, highest: int | None, num_messages: int, expected: int
) -> None:
    assert batch_highest_sequence_id(seq, highest, num_messages) == expected


def test_cpp_batch_after_restart_resumes_past_the_whole_batch(log: FakeLog) -> None:
    """The improvement over Java: a 5-message C++ batch starting at 10 covers 10..14."""
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    high = batch_highest_sequence_id(10, None, 5)
    publish(dedup, log, "p1", 10, high)
    recovered: MessageDeduplication[tuple[int, int]] = MessageDeduplication.recover(
        {}, [("p1", 10, high)], now=0.0
    )
    assert recovered.last_sequence_id("p1") == 14
    assert recovered.check("p1", 10, 14) is DUP
    assert recovered.check("p1", 15, 19) is NOT_DUP


# --------------------------------------------------------------------------- last_sequence_id


def test_last_sequence_id_is_minus_one_for_an_unknown_name(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    assert dedup.last_sequence_id("nobody") == -1


def test_last_sequence_id_reports_pushed_while_a_write_is_in_flight(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    for seq in (0, 1, 2):
        publish(dedup, log, "my-producer-name", seq)
    assert dedup.last_sequence_id("my-producer-name") == 2
    dedup.check("my-producer-name", 3, 3)
    # A re-created producer resumes at 4, never at an id that is already pushed.
    assert dedup.last_sequence_id("my-producer-name") == 3
    dedup.on_write_failed()
    assert dedup.last_sequence_id("my-producer-name") == 2


# --------------------------------------------------------------------------- snapshots


def test_no_snapshot_before_anything_is_persisted(
    dedup: MessageDeduplication[tuple[int, int]],
) -> None:
    assert not dedup.should_snapshot(now=1e9)
    with pytest.raises(DedupStateError):
        dedup.snapshot()


def test_snapshot_after_entries_interval(log: FakeLog) -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication(
        DedupConfig(entries_interval=1000, snapshot_interval_s=120)
    )
    now = 0.0
    for seq in range(999):
        publish(dedup, log, "p1", seq)
    assert dedup.should_snapshot(now)  # never snapshotted and something changed
    snap = dedup.snapshot()
    dedup.on_snapshot_taken((1, 998), now)
    assert snap == {"p1": 998}
    assert not dedup.should_snapshot(now)

    for seq in range(999, 1998):
        publish(dedup, log, "p1", seq)
    assert dedup.entries_since_snapshot == 999
    assert not dedup.should_snapshot(now)
    assert not dedup.snapshot_due_by_entries()
    publish(dedup, log, "p1", 1998)
    assert dedup.should_snapshot(now)  # 1000 entries, no time passed
    assert dedup.snapshot_due_by_entries()


def test_snapshot_due_by_entries_ignores_time(log: FakeLog) -> None:
    """The group-commit path asks only this: the time-based snapshot belongs to the periodic
    task, which brokerDeduplicationSnapshotFrequencyInSeconds=0 disables (T1)."""
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication(
        DedupConfig(entries_interval=10, snapshot_interval_s=1)
    )
    assert not dedup.snapshot_due_by_entries()
    for seq in range(9):
        publish(dedup, log, "p1", seq)
    assert dedup.should_snapshot(now=100.0)
    assert not dedup.snapshot_due_by_entries()


def test_time_based_snapshot_only_when_something_changed(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish(dedup, log, "p1", 0)
    dedup.snapshot()
    dedup.on_snapshot_taken((1, 0), now=100.0)
    assert not dedup.should_snapshot(now=1000.0)  # idle and unchanged: nothing to do

    publish(dedup, log, "p1", 1)
    assert not dedup.should_snapshot(now=219.9)
    assert dedup.should_snapshot(now=220.0)


def test_time_based_snapshot_can_be_disabled(log: FakeLog) -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication(
        DedupConfig(entries_interval=3, snapshot_interval_s=0)
    )
    publish(dedup, log, "p1", 0)
    assert not dedup.should_snapshot(now=1e9)
    publish(dedup, log, "p1", 1)
    publish(dedup, log, "p1", 2)
    assert dedup.should_snapshot(now=0.0)


def test_entries_persisted_while_a_snapshot_is_stored_still_count(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish(dedup, log, "p1", 0)
    snap = dedup.snapshot()
    position = dedup.last_persisted_position
    assert position is not None
    publish(dedup, log, "p1", 1)  # lands while the snapshot is being written
    dedup.on_snapshot_taken(position, now=5.0)
    assert snap == {"p1": 0}
    assert dedup.entries_since_snapshot == 1
    stats = dedup.stats()
    assert stats["last_snapshot_position"] == position
    assert stats["last_snapshot_time"] == 5.0


def test_on_snapshot_taken_rejects_a_position_it_did_not_hand_out(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish(dedup, log, "p1", 0)
    with pytest.raises(DedupStateError):
        dedup.on_snapshot_taken((1, 0), now=0.0)  # no snapshot() yet
    dedup.snapshot()
    with pytest.raises(DedupStateError):
        dedup.on_snapshot_taken((7, 7), now=0.0)


def test_snapshot_is_bounded_to_the_most_recently_persisted_producers(log: FakeLog) -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication(
        DedupConfig(max_number_of_producers=3)
    )
    for i, name in enumerate(["a", "b", "c", "d", "e"]):
        publish(dedup, log, name, i)
    assert dedup.snapshot() == {"c": 2, "d": 3, "e": 4}
    publish(dedup, log, "a", 10)  # "a" is active again
    snap = dedup.snapshot()
    assert snap == {"d": 3, "e": 4, "a": 10}
    assert list(snap) == ["d", "e", "a"]  # oldest first, so recovery keeps the order
    assert len(dedup.highest_persisted) == 5  # the live state is not bounded


# --------------------------------------------------------------------------- recovery


def test_recovery_overlays_the_replay_on_the_snapshot() -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.recover(
        {"p1": 5, "p2": 7},
        [("p1", 6, 6), ("p3", 0, 4), ("p1", 7, 9)],
        now=50.0,
        snapshot_position=(1, 10),
        last_position=(1, 13),
    )
    expected = {"p1": 9, "p2": 7, "p3": 4}
    assert dedup.state is DedupState.READY
    assert dedup.highest_persisted == expected
    assert dedup.highest_pushed == expected
    assert dedup.last_persisted_position == (1, 13)
    assert dedup.entries_since_snapshot == 3
    assert dedup.should_snapshot(now=50.0)  # snapshot soon after a replay (#22479)
    assert dedup.check("p1", 9, 9) is DUP
    assert dedup.check("p1", 10, 10) is NOT_DUP


def test_empty_recovery_keeps_the_snapshot_position() -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.recover(
        {"p1": 5}, [], now=0.0, snapshot_position=(1, 10)
    )
    assert dedup.last_persisted_position == (1, 10)
    assert dedup.entries_since_snapshot == 0
    assert not dedup.should_snapshot(now=1e9)
    assert dedup.stats()["last_snapshot_position"] == (1, 10)


def test_replay_keeps_the_highest_mark_even_if_the_log_goes_back() -> None:
    """A write reported failed may still have landed before its retry: keep the max."""
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.recover(
        {}, [("p1", 6, 10), ("p1", 6, 8)], now=0.0
    )
    assert dedup.highest_persisted == {"p1": 10}


def test_recovery_runs_once_and_blocks_publishing_until_done() -> None:
    """Pulsar #25954: no check before the replay is complete, no second replay."""
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery(
        {"p1": 5}, snapshot_position=(1, 0)
    )
    assert dedup.stats()["state"] == "recovering"
    for blocked in (
        lambda: dedup.check("p1", 6, 6),
        lambda: dedup.on_persisted("p1", 6, (1, 1)),
        lambda: dedup.last_sequence_id("p1"),
        dedup.on_write_failed,
        dedup.snapshot,
    ):
        with pytest.raises(DedupStateError):
            blocked()
    assert dedup.replay([("p1", 6, 6)]) == 1
    assert dedup.replay([("p1", 7, 7), ("p2", 0, 0)]) == 2  # chunked reads
    assert dedup.stats()["tracked_producers"] == 2
    dedup.finish_recovery(now=0.0, last_position=(1, 3))
    assert dedup.state is DedupState.READY
    assert dedup.stats()["replayed_entries"] == 3

    with pytest.raises(DedupStateError):
        dedup.finish_recovery(now=0.0)
    with pytest.raises(DedupStateError):
        dedup.replay([("p1", 3, 3)])
    assert dedup.highest_persisted == {"p1": 7, "p2": 0}


def test_recovered_names_are_purged_unless_their_producer_returns() -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery(
        {"gone": 1, "back": 2, "early": 3}
    )
    dedup.producer_connected("early")  # attached while the topic was loading
    dedup.finish_recovery(now=100.0)
    dedup.producer_connected("back")
    assert dedup.purge_inactive(now=200.0, timeout_s=60.0) == ["gone"]
    assert dedup.highest_persisted == {"back": 2, "early": 3}


# --------------------------------------------------------------------------- D8: inactivity


def test_d8_only_producers_idle_longer_than_the_timeout_are_purged(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    for name in ("idle", "recent", "active"):
        dedup.producer_connected(name)
        publish(dedup, log, name, 0)
    dedup.producer_disconnected("idle", now=0.0)
    dedup.producer_disconnected("recent", now=50.0)

    assert dedup.purge_inactive(now=60.0, timeout_s=60.0) == []  # exactly the timeout: kept
    assert dedup.purge_inactive(now=61.0, timeout_s=60.0) == ["idle"]
    assert set(dedup.highest_pushed) == {"recent", "active"}
    assert set(dedup.highest_persisted) == {"recent", "active"}
    assert dedup.check("idle", 0, 0) is NOT_DUP  # forgotten: the old id is new again

    # "recent" was not purged above and is still purged later (Java would lose track of it).
    assert dedup.purge_inactive(now=111.0, timeout_s=60.0) == ["recent"]
    assert dedup.purge_inactive(now=1e9, timeout_s=60.0) == []  # "active" never idles
    assert dedup.check("active", 0, 0) is DUP
    assert dedup.stats()["purged_producers"] == 2


def test_reconnect_before_the_timeout_keeps_the_entry(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    dedup.producer_connected("p1")
    publish(dedup, log, "p1", 4)
    dedup.producer_disconnected("p1", now=0.0)
    dedup.producer_connected("p1")
    assert dedup.purge_inactive(now=1e6, timeout_s=60.0) == []
    assert dedup.last_sequence_id("p1") == 4


def test_name_idles_only_when_its_last_producer_leaves(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    """Two producers share a name briefly during a reconnect; the old one leaving must not
    start the inactivity clock of the new one."""
    dedup.producer_connected("p1")
    dedup.producer_connected("p1")
    publish(dedup, log, "p1", 0)
    dedup.producer_disconnected("p1", now=0.0)
    assert dedup.purge_inactive(now=1e6, timeout_s=1.0) == []
    dedup.producer_disconnected("p1", now=10.0)
    assert dedup.purge_inactive(now=12.0, timeout_s=1.0) == ["p1"]


# --------------------------------------------------------------------------- T2, stats


def test_t2_clear_forgets_everything_and_restarts_tracking(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    dedup.producer_connected("p1")
    for seq in range(3):
        publish(dedup, log, "p1", seq)
    publish(dedup, log, "p1", 1)
    dedup.snapshot()
    dedup.on_snapshot_taken((1, 2), now=1.0)

    dedup.clear()

    assert dedup.last_sequence_id("p1") == -1
    assert dedup.highest_pushed == {}
    assert dedup.highest_persisted == {}
    assert dedup.stats() == {
        "state": "ready",
        "tracked_producers": 0,
        "connected_producers": 1,
        "chunked_messages_in_flight": 0,
        "inactive_producers": 0,
        "accepted": 0,
        "duplicates_dropped": 0,
        "unknown_answers": 0,
        "straddling_batches": 0,
        "write_failures": 0,
        "purged_producers": 0,
        "replayed_entries": 0,
        "unreadable_entries_skipped": 0,
        "recovery_seconds": None,
        "entries_since_snapshot": 0,
        "last_persisted_position": None,
        "last_snapshot_position": None,
        "last_snapshot_time": None,
    }
    assert publish(dedup, log, "p1", 1) is NOT_DUP  # re-enabled: starts fresh


def test_clear_abandons_a_recovery() -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery({"p1": 3})
    dedup.clear()
    assert dedup.state is DedupState.READY
    assert dedup.check("p1", 0, 0) is NOT_DUP


def test_stats_count_verdicts(dedup: MessageDeduplication[tuple[int, int]]) -> None:
    dedup.check("p1", 0, 0)
    dedup.check("p1", 0, 0)
    dedup.on_persisted("p1", 0, (1, 0))
    dedup.check("p1", 0, 0)
    dedup.producer_connected("p2")
    stats = dedup.stats()
    assert stats["accepted"] == 1
    assert stats["unknown_answers"] == 1
    assert stats["duplicates_dropped"] == 1
    assert stats["tracked_producers"] == 1
    assert stats["connected_producers"] == 1
    assert stats["entries_since_snapshot"] == 1
    assert stats["last_persisted_position"] == (1, 0)
    dedup.on_write_failed()
    assert dedup.stats()["write_failures"] == 1


def test_recovery_reports_its_duration() -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery({})
    dedup.finish_recovery(now=0.0, elapsed_s=0.25)
    assert dedup.stats()["recovery_seconds"] == 0.25


# --------------------------------------------------------------------------- property test

PRODUCERS = ("p0", "p1", "p2")


@dataclass(frozen=True)
class Op:
    """One step of a random schedule; only the fields its kind needs are meaningful."""

    kind: str  # send | persist | fail | snapshot | tick | crash
    name: str = ""
    seq: int = 0
    count: int = 1
    dt: float = 0.0


_send = st.builds(
    Op,
    kind=st.just("send"),
    name=st.sampled_from(PRODUCERS),
    seq=st.integers(min_value=0, max_value=40),
    count=st.integers(min_value=1, max_value=4),
)
_op = st.one_of(
    _send,
    _send,
    st.just(Op("persist")),
    st.just(Op("persist")),
    st.just(Op("fail")),
    st.just(Op("snapshot")),
    st.builds(Op, kind=st.just("tick"), dt=st.floats(min_value=0.0, max_value=100.0)),
    st.just(Op("crash")),
)


@dataclass
class World:
    """What the topic and the disk hold, kept independently of the dedup object."""

    log: list[tuple[str, int, int, int]] = field(default_factory=list)  # name, seq, high, pos
    in_flight: list[tuple[str, int, int]] = field(default_factory=list)
    snapshot: dict[str, int] = field(default_factory=dict)
    snapshot_position: int | None = None
    now: float = 0.0

    def stored_mark(self, name: str) -> int | None:
        return max((high for n, _, high, _ in self.log if n == name), default=None)

    def in_flight_mark(self, name: str) -> int | None:
        return max((high for n, _, high in self.in_flight if n == name), default=None)

    def model(self) -> dict[str, int]:
        marks: dict[str, int] = {}
        for name, _, high, _ in self.log:
            marks[name] = max(high, marks.get(name, high))
        return marks

    def replay_after_snapshot(self) -> list[tuple[str, int, int]]:
        start = -1 if self.snapshot_position is None else self.snapshot_position
        return [(name, seq, high) for name, seq, high, pos in self.log if pos > start]


def _check_verdict(world: World, name: str, seq: int, high: int, result: DedupResult) -> None:
    stored = world.stored_mark(name)
    flying = world.in_flight_mark(name)
    if result is NOT_DUP:
        if stored is not None and seq <= stored:
            # A batch straddling the durable mark (R8): stored whole because part of it is
            # new, and only when nothing of this name is in flight.
            assert high > stored
            assert flying is None or flying <= stored
        else:
            # Otherwise nothing is accepted twice: the id is above everything in flight.
            assert flying is None or seq > flying
    elif result is DUP:
        # Only ids really covered by the durable log are answered as duplicates.
        assert stored is not None
        assert high <= stored
    else:
        # UNKNOWN only while a write that might cover the ids is pending.
        assert flying is not None
        assert seq <= max(flying, stored if stored is not None else flying)
        assert stored is None or high > stored


CONFIG = DedupConfig(entries_interval=4)


def _apply(dedup: MessageDeduplication[int], world: World, op: Op) -> MessageDeduplication[int]:
    if op.kind == "send":
        high = op.seq + op.count - 1
        result = dedup.check(op.name, op.seq, high)
        _check_verdict(world, op.name, op.seq, high, result)
        if result is NOT_DUP:
            world.in_flight.append((op.name, op.seq, high))
    elif op.kind == "persist" and world.in_flight:
        name, seq, high = world.in_flight.pop(0)
        position = len(world.log)
        world.log.append((name, seq, high, position))
        dedup.on_persisted(name, high, position)
    elif op.kind == "fail":
        world.in_flight.clear()  # the failed write and everything queued behind it
        dedup.on_write_failed()
    elif op.kind == "snapshot" and dedup.should_snapshot(world.now):
        snap = dedup.snapshot()
        snap_position = dedup.last_persisted_position
        assert snap_position is not None
        dedup.on_snapshot_taken(snap_position, world.now)
        world.snapshot, world.snapshot_position = snap, snap_position
    elif op.kind == "tick":
        world.now += op.dt
    elif op.kind == "crash":
        world.in_flight.clear()  # unacknowledged writes die with the process
        dedup = MessageDeduplication.recover(
            world.snapshot,
            world.replay_after_snapshot(),
            now=world.now,
            config=CONFIG,
            snapshot_position=world.snapshot_position,
            last_position=world.log[-1][3] if world.log else world.snapshot_position,
        )
        assert dict(dedup.highest_pushed) == dict(dedup.highest_persisted)
    return dedup


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(_op, max_size=60))
def test_recovery_rebuilds_the_persisted_marks_of_the_log(ops: list[Op]) -> None:
    """Random interleavings of check/persist/fail/snapshot/crash: after every step the
    persisted marks equal the model built from the durable log, and so do the marks rebuilt
    by snapshot + replay after a crash; no verdict ever lets an id be stored twice."""
    world = World()
    dedup: MessageDeduplication[int] = MessageDeduplication(CONFIG)
    for op in ops:
        dedup = _apply(dedup, world, op)
        model = world.model()
        assert dict(dedup.highest_persisted) == model
        for name in PRODUCERS:
            # pushed = the highest id stored or still in flight, -1 if neither.
            marks = [m for m in (model.get(name), world.in_flight_mark(name)) if m is not None]
            assert dedup.last_sequence_id(name) == max(marks, default=-1)


# --------------------------------------------------------------------------- chunked messages


def publish_chunk(
    dedup: MessageDeduplication[tuple[int, int]],
    log: FakeLog,
    name: str,
    seq: int,
    chunk: int,
    chunks: int,
) -> DedupResult:
    """check_chunk + (when new) a successful durable write, as the topic does it."""
    last = chunk == chunks - 1
    result = dedup.check_chunk(name, seq, chunk, last)
    if result is NOT_DUP:
        if last:
            dedup.on_persisted(name, seq, log.position())
        else:
            dedup.on_chunk_persisted(name, seq, chunk, log.position())
    return result


def test_chunks_of_one_message_share_its_sequence_id(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    """Java's bug this fixes: later chunks reuse the id and must not be answered DUP."""
    assert [publish_chunk(dedup, log, "p", 7, c, 3) for c in range(3)] == [NOT_DUP] * 3
    assert dedup.last_sequence_id("p") == 7
    assert dedup.highest_persisted == {"p": 7}
    assert dedup.stats()["chunked_messages_in_flight"] == 0


def test_the_mark_moves_only_with_the_last_chunk(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish(dedup, log, "p", 6)
    publish_chunk(dedup, log, "p", 7, 0, 3)
    publish_chunk(dedup, log, "p", 7, 1, 3)
    assert dedup.last_sequence_id("p") == 6
    assert dedup.highest_persisted == {"p": 6}


def test_a_whole_chunked_message_resent_is_stored_once(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    for chunk in range(3):
        publish_chunk(dedup, log, "p", 7, chunk, 3)
    assert [publish_chunk(dedup, log, "p", 7, c, 3) for c in range(3)] == [DUP] * 3


def test_a_resend_after_a_partial_write_stores_only_the_missing_chunks(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    """Chunks 0-1 durable, the rest lost with the broker: the client resends 0-3."""
    publish_chunk(dedup, log, "p", 7, 0, 4)
    publish_chunk(dedup, log, "p", 7, 1, 4)
    results = [publish_chunk(dedup, log, "p", 7, c, 4) for c in range(4)]
    assert results == [DUP, DUP, NOT_DUP, NOT_DUP]
    assert dedup.highest_persisted == {"p": 7}


def test_a_chunk_in_flight_is_unknown(dedup: MessageDeduplication[tuple[int, int]]) -> None:
    assert dedup.check_chunk("p", 7, 0, False) is NOT_DUP  # not durable yet
    assert dedup.check_chunk("p", 7, 0, False) is UNKNOWN
    assert dedup.check_chunk("p", 7, 1, False) is NOT_DUP


def test_a_failed_write_rolls_chunk_progress_back(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish_chunk(dedup, log, "p", 7, 0, 3)
    assert dedup.check_chunk("p", 7, 1, False) is NOT_DUP
    dedup.on_write_failed()
    assert dedup.check_chunk("p", 7, 0, False) is DUP
    assert dedup.check_chunk("p", 7, 1, False) is NOT_DUP  # the client's resend is stored


def test_a_new_message_after_an_abandoned_chunked_one(
    dedup: MessageDeduplication[tuple[int, int]], log: FakeLog
) -> None:
    publish_chunk(dedup, log, "p", 7, 0, 3)
    assert publish(dedup, log, "p", 8) is NOT_DUP  # the client gave message 7 up
    assert publish_chunk(dedup, log, "p", 7, 1, 3) is DUP  # below the mark now
    assert dedup.stats()["chunked_messages_in_flight"] == 0


def test_chunk_progress_survives_snapshot_and_replay(log: FakeLog) -> None:
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    publish(dedup, log, "p", 6)
    publish_chunk(dedup, log, "p", 7, 0, 4)
    snapshot = dedup.snapshot()
    assert all(isinstance(v, int) for v in snapshot.values())
    recovered: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery(snapshot)
    recovered.replay_chunk("p", 7, 1)  # written after the snapshot
    recovered.finish_recovery(now=0.0)
    assert recovered.highest_persisted == {"p": 6}
    assert [publish_chunk(recovered, log, "p", 7, c, 4) for c in range(4)] == [
        DUP,
        DUP,
        NOT_DUP,
        NOT_DUP,
    ]


def test_chunk_progress_is_made_by_the_first_chunk(log: FakeLog) -> None:
    """Issue #26: a topic that never sees a chunked message holds no chunk state, through a
    recovery, snapshots, write failures and purges; the first chunk makes it."""
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery({})
    dedup.replay([("p", 5, 5)])
    dedup.finish_recovery(now=0.0)
    publish(dedup, log, "p", 6)
    dedup.on_write_failed()
    snapshot = dedup.snapshot()
    dedup.producer_disconnected("q", now=0.0)
    dedup.purge_inactive(now=10.0, timeout_s=1.0)
    assert dedup._chunks is None
    assert dedup.stats()["chunked_messages_in_flight"] == 0
    recovered: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery(snapshot)
    recovered.finish_recovery(now=0.0)
    assert recovered._chunks is None
    assert publish_chunk(dedup, log, "p", 7, 0, 2) is NOT_DUP
    assert dedup._chunks is not None
    assert dedup.check_chunk("p", 7, 0, False) is DUP
    with_chunk = dedup.snapshot()
    again: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery(with_chunk)
    assert again._chunks is not None  # the snapshot carried the chunk progress
    again.finish_recovery(now=0.0)
    assert again.check_chunk("p", 7, 0, False) is DUP
    dedup.clear()
    assert dedup._chunks is None


def test_replay_drops_progress_of_a_message_completed_later(log: FakeLog) -> None:
    recovered: MessageDeduplication[tuple[int, int]] = MessageDeduplication.begin_recovery({})
    recovered.replay_chunk("p", 7, 0)
    recovered.replay([("p", 7, 7)])
    recovered.finish_recovery(now=0.0)
    assert recovered.stats()["chunked_messages_in_flight"] == 0
    assert recovered.check_chunk("p", 7, 0, False) is DUP


# ------------------------------------------------- the SEND path's one-call forms (issue #26)

send_steps = st.lists(
    st.tuples(
        st.sampled_from(["p1", "p2"]),
        st.integers(0, 12),  # first id
        st.integers(0, 3),  # extra ids of a batch
        st.sampled_from(["persist", "pending", "fail"]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(send_steps)
def test_check_above_pushed_then_check_is_check(steps: list[tuple[str, int, int, str]]) -> None:
    """`check_above_pushed` (None: fall back to `check`) answers and moves the marks exactly as
    `check` alone, with writes landing, staying in flight and failing in between."""
    fused: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    plain: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    log = FakeLog()
    in_flight: list[tuple[str, int]] = []
    for name, seq, extra, outcome in steps:
        rare_path = fused.may_be_duplicate(name, seq)
        answer = fused.check_above_pushed(name, seq, seq + extra)
        assert (answer is None) == rare_path
        if answer is None:
            answer = fused.check(name, seq, seq + extra)
        assert answer is plain.check(name, seq, seq + extra)
        if answer is NOT_DUP:
            in_flight.append((name, seq + extra))
        if outcome == "persist" and in_flight:
            position = log.position()
            for dedup in (fused, plain):
                dedup.on_persisted(*in_flight[0], position)
            in_flight.pop(0)
        elif outcome == "fail":
            fused.on_write_failed()
            plain.on_write_failed()
            in_flight.clear()
        if plain.last_persisted_position is not None:
            assert fused.snapshot() == plain.snapshot()
        assert fused.stats() == plain.stats()
        for known in ("p1", "p2"):
            assert fused.last_sequence_id(known) == plain.last_sequence_id(known)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["p1", "p2"]), st.integers(0, 20)), min_size=1, max_size=30)
)
def test_a_run_persisted_in_one_call_leaves_the_marks_of_one_call_per_entry(
    entries: list[tuple[str, int]],
) -> None:
    """The group commit reports a run of one name's entries once (``count``, the run's largest
    id, its last position): the marks, the order of names and the counters are the same."""
    runs: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    each: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    log = FakeLog()
    group = [(name, high, log.position()) for name, high in entries]
    for name, high, position in group:
        each.on_persisted(name, high, position)
    start = 0
    while start < len(group):
        end = start
        while end + 1 < len(group) and group[end + 1][0] == group[start][0]:
            end += 1
        run = group[start : end + 1]
        runs.on_persisted(run[0][0], max(h for _, h, _ in run), run[-1][2], len(run))
        start = end + 1
    assert runs.snapshot() == each.snapshot()
    assert list(runs.snapshot()) == list(each.snapshot())
    assert runs.stats() == each.stats()
    assert runs.last_persisted_position == each.last_persisted_position
