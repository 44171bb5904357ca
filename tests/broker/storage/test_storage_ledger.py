"""Ledger basics: positions, rolls, group commit, reads, cache, properties, concurrency."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.position import BEFORE_EVERYTHING
from protocol.enums import InitialPosition
from tests.broker.storage.faults import FaultyLayer, InlineExecutor, NoSyncLayer

T = TypeVar("T")


def _open(directory: Path, config: LedgerConfig, layer: NoSyncLayer | None = None) -> Ledger:
    return Ledger.open(
        directory, config, file_layer=layer or NoSyncLayer(), preallocator=InlineExecutor()
    )


def test_appends_are_buffered_until_flush(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig())
    assert ledger.last_position is None
    assert ledger.flush() is None
    first = ledger.append(b"one")
    assert first == Position(1, 0)
    assert ledger.last_position == first
    assert ledger.last_confirmed_position is None
    assert ledger.read(first, 10) == []  # not durable yet: not readable
    assert ledger.flush() == first
    assert ledger.read(first, 10) == [(first, b"one")]
    assert ledger.first_position == first
    ledger.close()


def test_roll_by_entries_and_by_bytes(tmp_path: Path) -> None:
    by_count = _open(tmp_path / "a", LedgerConfig(max_entries_per_ledger=2, preallocate_bytes=0))
    assert [by_count.append(b"x") for _ in range(5)] == [
        Position(1, 0),
        Position(1, 1),
        Position(2, 0),
        Position(2, 1),
        Position(3, 0),
    ]
    by_count.close()
    by_size = _open(
        tmp_path / "b", LedgerConfig(max_size_per_ledger_bytes=100, preallocate_bytes=64)
    )
    positions = [by_size.append(b"y" * 30) for _ in range(4)]  # header 20 + 2 x 38 = 96
    assert [p.ledger_id for p in positions] == [1, 1, 2, 2]
    big = by_size.append(b"z" * 500)  # larger than a segment: alone in its own
    assert big == Position(3, 0)
    assert by_size.append(b"after") == Position(4, 0)
    by_size.flush()
    assert [d for _, d in by_size.iter_entries(BEFORE_EVERYTHING)][-2:] == [b"z" * 500, b"after"]
    by_size.close()


def test_group_commit_is_one_write_and_one_fdatasync_per_touched_segment(tmp_path: Path) -> None:
    layer = FaultyLayer()  # records calls, injects nothing
    ledger = _open(tmp_path / "t", LedgerConfig(max_entries_per_ledger=100), layer)
    ledger.append(b"warm-up")
    ledger.flush()
    layer.calls.clear()
    for i in range(50):
        ledger.append(b"%d" % i)
    ledger.flush()
    segment_calls = [op for op, path in layer.calls if path.endswith(".seg")]
    assert segment_calls == ["pwrite", "fdatasync"]
    ledger.close()


def test_sync_data_false_writes_without_fdatasync(tmp_path: Path) -> None:
    layer = FaultyLayer()
    ledger = _open(tmp_path / "t", LedgerConfig(sync_data=False), layer)
    ledger.append(b"a")
    ledger.flush()
    assert not [op for op, path in layer.calls if op == "fdatasync" and path.endswith(".seg")]
    ledger.close()


def test_read_limits_and_positions(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig(max_entries_per_ledger=3, preallocate_bytes=0))
    p = [ledger.append(bytes([i]) * 10) for i in range(8)]
    ledger.flush()
    assert [pos for pos, _ in ledger.read(p[0], 5)] == p[:5]  # crosses ledger boundaries
    assert [pos for pos, _ in ledger.read(p[0], 100, max_bytes=25)] == p[:2]
    assert [pos for pos, _ in ledger.read(p[2], 100, max_bytes=1)] == [p[2]]  # at least one
    assert ledger.read(Position(3, 2), 10) == []  # past the end
    assert ledger.read(Position(99, 0), 10) == []
    assert [pos for pos, _ in ledger.read(Position(1, 7), 2)] == [p[3], p[4]]  # gap: next ledger
    assert ledger.next_position(p[2]) == p[3]
    assert ledger.next_position(p[7]) == Position(3, 2)
    assert ledger.next_position(Position(1, -1)) == p[0]
    assert ledger.has_entry(p[7])
    assert not ledger.has_entry(Position(3, 2))
    assert ledger.entry_count_between(p[1], p[6]) == 6
    assert ledger.entry_count_between(BEFORE_EVERYTHING, Position(99, 0)) == 8
    assert ledger.entry_count_between(p[5], p[4]) == 0
    ledger.close()


def test_reads_are_served_from_the_cache_then_from_disk(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig(cache_size_bytes=300, preallocate_bytes=0))
    p = [ledger.append(bytes([i]) * 100) for i in range(5)]
    ledger.flush()
    before = ledger.stats()
    assert [d[0] for _, d in ledger.read(p[0], 10)] == [0, 1, 2, 3, 4]
    after = ledger.stats()
    assert after["cache_hits"] - before["cache_hits"] == 3  # the 3 newest fit in 300 bytes
    assert after["cache_misses"] - before["cache_misses"] == 2
    ledger.close()
    reopened = _open(tmp_path / "t", LedgerConfig())
    assert [d[0] for _, d in reopened.read(p[0], 10)] == [0, 1, 2, 3, 4]  # cold, from disk
    reopened.close()


def test_iteration_and_newest_matching(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig(max_entries_per_ledger=7, preallocate_bytes=0))
    p = [ledger.append(i.to_bytes(4, "big")) for i in range(40)]
    ledger.flush()
    assert [pos for pos, _ in ledger.iter_entries(p[10], batch_entries=3)] == p[10:]
    for threshold in (0, 1, 17, 39, 40, 100):

        def below(entry: bytes, limit: int = threshold) -> bool:
            return int.from_bytes(entry, "big") < limit

        found = ledger.find_newest_matching(below)
        assert found == (p[min(threshold, 40) - 1] if threshold > 0 else None)
    ledger.close()


def test_properties_are_durable_and_survive_reopen(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig())
    ledger.set_property("pulsar.topic.epoch", 1)
    ledger.set_properties({"pulsar.topic.epoch": 2, "other": -5})
    assert ledger.properties == {"pulsar.topic.epoch": 2, "other": -5}
    with pytest.raises(TypeError):
        ledger.properties["x"] = 1  # type: ignore[index]
    ledger._abandon()  # no close: set_property alone must have made it durable
    reopened = _open(tmp_path / "t", LedgerConfig())
    assert reopened.properties == {"pulsar.topic.epoch": 2, "other": -5}
    reopened.close()


def test_each_open_starts_a_new_ledger_and_empty_ones_disappear(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    ledger = _open(directory, LedgerConfig())
    ledger.append(b"a")
    ledger.close()
    for _ in range(3):  # opened and closed without writing
        _open(directory, LedgerConfig()).close()
    ledger = _open(directory, LedgerConfig())
    position = ledger.append(b"b")
    assert position.ledger_id > 1
    ledger.close()
    assert sorted(p.name for p in directory.iterdir() if p.suffix == ".seg") == [
        f"{1:020d}.seg",
        f"{position.ledger_id:020d}.seg",
    ]
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_segments_are_preallocated_ahead_of_need(tmp_path: Path) -> None:
    config = LedgerConfig(max_entries_per_ledger=4, preallocate_bytes=8192)
    ledger = _open(tmp_path / "t", config)
    for _ in range(3):
        ledger.append(b"q")
    ledger.flush()
    (active,) = ledger.segment_paths()
    assert active.stat().st_size == 8192  # zero-filled; the logical end is tracked in memory
    spares = [p for p in (tmp_path / "t").iterdir() if p.name.startswith("spare-")]
    assert len(spares) == 1
    assert spares[0].stat().st_size == 8192
    ledger.close()
    assert active.stat().st_size < 8192  # sealed: cut to its data
    assert not [p for p in (tmp_path / "t").iterdir() if p.name.startswith("spare-")]


def test_delete_removes_everything(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    ledger = _open(directory, LedgerConfig())
    ledger.append(b"a")
    ledger.flush()
    ledger.open_cursor("c")
    ledger.delete()
    assert not directory.exists()
    fresh = _open(directory, LedgerConfig())
    assert fresh.last_confirmed_position is None
    assert dict(fresh.cursors) == {}
    fresh.close()


def test_concurrent_appends_and_flushes(tmp_path: Path) -> None:
    """One thread appends (the event loop), another flushes in a loop (asyncio.to_thread),
    a third tails with reads: every position reported durable is readable with its bytes."""
    config = LedgerConfig(
        max_entries_per_ledger=300, max_size_per_ledger_bytes=64 * 1024, preallocate_bytes=64 * 1024
    )
    ledger = Ledger.open(tmp_path / "t", config)  # real fdatasync, shared pre-allocator thread
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.randint(0, 400)) for _ in range(20_000)]
    appended: dict[Position, bytes] = {}
    reported: list[Position] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            for index, data in enumerate(payloads):
                appended[ledger.append(data)] = data
                if index % 100 == 0:
                    time.sleep(0.001)  # let the flusher and the tailer interleave
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def flusher() -> None:
        try:
            while not done.is_set():
                last = ledger.flush()
                if last is not None and (not reported or last != reported[-1]):
                    reported.append(last)
            reported.append(ledger.flush())  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    def tailer() -> None:
        try:
            position = BEFORE_EVERYTHING
            while not done.is_set() or position <= (ledger.last_confirmed_position or position):
                batch = ledger.read(position, 64)
                for pos, data in batch:
                    assert appended[pos] == data
                if batch:
                    position = ledger.next_position(batch[-1][0])
                elif done.is_set():
                    break
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (appender, flusher, tailer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert reported == sorted(reported)  # durable positions only move forward
    final = reported[-1]
    assert final == max(appended)
    everything = list(ledger.iter_entries(BEFORE_EVERYTHING))
    assert everything == sorted(appended.items())
    assert [data for _, data in everything] == payloads
    ledger.close()
    assert os.listdir(tmp_path / "t")


def test_the_active_segment_is_extended_with_zeros_ahead_of_the_data(tmp_path: Path) -> None:
    config = LedgerConfig(max_entries_per_ledger=10_000, preallocate_bytes=4096)
    ledger = _open(tmp_path / "t", config)
    payloads = [bytes([i % 251 + 1]) * 300 for i in range(40)]  # ~12 KiB, several chunks
    for payload in payloads:
        ledger.append(payload)
        ledger.flush()
        (active,) = ledger.segment_paths()
        data = active.read_bytes()
        # There is always zeroed room ahead of the durable data, never zeros inside it.
        assert data.rstrip(b"\0") == data[: len(data.rstrip(b"\0"))]
        assert len(data) - len(data.rstrip(b"\0")) >= 2048 - 300
    ledger._abandon()
    reopened = _open(tmp_path / "t", config)
    assert [d for _, d in reopened.iter_entries(BEFORE_EVERYTHING)] == payloads
    reopened.close()


class _QueuedForeverExecutor(Executor):
    """Every job stays queued, as behind a long line of other ledgers' pre-allocations."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return Future()


def test_flush_never_waits_for_preallocation_still_queued(tmp_path: Path) -> None:
    config = LedgerConfig(max_entries_per_ledger=3, preallocate_bytes=1 << 20)
    ledger = Ledger.open(
        tmp_path / "t", config, file_layer=NoSyncLayer(), preallocator=_QueuedForeverExecutor()
    )
    positions = [ledger.append(bytes([i])) for i in range(10)]
    assert ledger.flush() == positions[-1]  # would hang if it waited for the spare or extension
    assert [p for p, _ in ledger.iter_entries(BEFORE_EVERYTHING)] == positions
    assert all(path.stat().st_size < 1 << 20 for path in ledger.segment_paths())  # plain files
    ledger.close()


def test_a_spare_never_replaces_an_existing_segment(tmp_path: Path) -> None:
    """Cluster mode: a paused former owner rolling onto a segment id the new owner already
    created must fail, not rename its spare over the new owner's acknowledged data."""
    from broker.storage.files import OsFileLayer, segment_file_name
    from broker.storage.segment import Segment

    layer = OsFileLayer()
    taken = tmp_path / segment_file_name(7)
    taken.write_bytes(b"the new owner's segment")
    spare = tmp_path / "spare-x.seg.tmp"
    spare.write_bytes(b"\0" * 4096)
    with pytest.raises(FileExistsError):
        Segment.create(layer, taken, 7, spare)
    assert taken.read_bytes() == b"the new owner's segment"
    # A free id: the spare becomes the segment and its temporary name is gone.
    fresh = Segment.create(layer, tmp_path / segment_file_name(8), 8, spare)
    assert not spare.exists()
    assert (tmp_path / segment_file_name(8)).stat().st_size == 4096
    fresh.close()


def test_an_idle_ledger_holds_no_writer_or_metadata_lock(tmp_path: Path) -> None:
    """Issue #26: opening a ledger (a topic's load) makes neither writer lock nor the metadata
    lock, and keeps no decoded metadata document; the first append, flush and property change
    make them. Its entry cache is a view of four slots onto the broker's shared one."""
    config = LedgerConfig(max_entries_per_ledger=2, preallocate_bytes=0)
    ledger = _open(tmp_path / "t", config)
    ledger.open_cursor("c")
    writer, meta, cache = ledger._writer, ledger._meta, ledger._cache
    assert (writer._lock, writer._flush_lock, meta._lock) == (None,) * 3
    assert type(cache).__slots__ == ("_owner", "_store", "hits", "misses")
    assert cache.size_bytes == 0
    assert meta._loaded is None
    ledger.set_property("p", 1)
    assert meta._lock is not None
    positions = [ledger.append(b"e%d" % i) for i in range(5)]  # three ledgers: two seals
    assert writer._lock is not None
    assert ledger.flush() == positions[-1]
    assert writer._flush_lock is not None
    assert cache.size_bytes == 10
    ledger.close()
    reopened = _open(tmp_path / "t", config)
    assert reopened.properties == {"p": 1}
    assert [entry for _, entry in reopened.read(positions[0], 10)] == [b"e%d" % i for i in range(5)]
    reopened.close()


def test_position_queries_follow_segments_added_and_trimmed(tmp_path: Path) -> None:
    """The segment table bisects a list of ledger ids kept with its segments (no list built
    per query): it must follow every segment added, sealed and trimmed."""
    config = LedgerConfig(max_entries_per_ledger=2, preallocate_bytes=0)
    ledger = _open(tmp_path / "t", config)
    cursor = ledger.open_cursor("c", InitialPosition.Earliest)
    positions = [ledger.append(b"e%d" % i) for i in range(7)]  # ledgers 1, 2, 3, 4
    ledger.flush()
    table = ledger._table
    assert table._ids == tuple(s.ledger_id for s in table.all()) == (1, 2, 3, 4)
    assert [ledger.next_position(p) for p in positions[:-1]] == positions[1:]
    assert all(ledger.has_entry(p) for p in positions)
    assert not ledger.has_entry(Position(2, 2))
    assert ledger.entry_count_between(positions[1], positions[5]) == 5
    cursor.mark_delete(positions[3])
    cursor.persist()
    assert ledger.trim() == 2
    assert table._ids == (3, 4)
    assert not ledger.has_entry(positions[0])
    assert ledger.next_position(positions[0]) == positions[4]
    assert ledger.read(positions[0], 1) == [(positions[4], b"e4")]
    ledger.close()


def test_cursors_is_a_live_read_only_view(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t", LedgerConfig(preallocate_bytes=0))
    view = ledger.cursors
    assert ledger.cursors is view  # made once, not copied per call
    cursor = ledger.open_cursor("c")
    assert dict(view) == {"c": cursor}
    with pytest.raises(TypeError):
        view["d"] = cursor  # type: ignore[index]
    ledger.delete_cursor("c")
    assert dict(view) == {}
    ledger.close()
