"""Reads off the event loop: ``read_cached`` (memory only) and reads from many threads at once.

The broker serves tailing consumers with ``Ledger.read_cached`` on the event loop and runs every
other read in disk threads, concurrently with appends, flushes and trimming.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.position import BEFORE_EVERYTHING
from broker.storage.segment import Segment
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer


def _open(directory: Path, config: LedgerConfig) -> Ledger:
    return Ledger.open(directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


def test_read_cached_returns_what_read_returns_when_everything_is_cached(tmp_path: Path) -> None:
    config = LedgerConfig(max_entries_per_ledger=7, preallocate_bytes=0)
    ledger = _open(tmp_path / "t", config)
    rng = random.Random(5)
    positions = [ledger.append(rng.randbytes(rng.randint(0, 50))) for _ in range(40)]
    ledger.flush()
    probes = [*positions, Position(1, -1), Position(1, 99), Position(99, 0)]
    for _ in range(300):
        start = rng.choice(probes)
        max_entries = rng.randint(1, 30)
        max_bytes = rng.choice([1, 20, 100, 1 << 20])
        expected = ledger.read(start, max_entries, max_bytes)
        assert ledger.read_cached(start, max_entries, max_bytes) == expected
    assert ledger.read_cached(Position(99, 0), 10) == []  # past the end: nothing, not "disk"
    ledger.close()


def test_read_cached_never_touches_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = LedgerConfig(max_entries_per_ledger=5, preallocate_bytes=0)
    ledger = _open(tmp_path / "t", config)
    old = [ledger.append(bytes([i]) * 10) for i in range(12)]
    ledger.close()
    ledger = _open(tmp_path / "t", config)  # sealed segments, empty cache, no index loaded
    new = [ledger.append(bytes([i]) * 10) for i in range(3)]
    ledger.flush()

    def no_disk(*_args: object) -> None:
        raise AssertionError("read_cached touched a file")

    with monkeypatch.context() as patch:
        patch.setattr(Segment, "_load_index", no_disk)
        patch.setattr("broker.storage.segment.pread_exact", no_disk)
        assert ledger.read_cached(old[0], 10) is None  # on disk only: the caller reads it
        assert ledger.read_cached(old[7], 1) is None
        assert ledger.read_cached(Position(old[-1].ledger_id, old[-1].entry_id + 1), 10) == (
            ledger.read_cached(new[0], 10)
        )
        assert [p for p, _ in ledger.read_cached(new[0], 10) or []] == new
    assert [p for p, _ in ledger.read(old[0], 20)] == old + new  # the disk read still works
    ledger.close()


def test_a_sealed_segment_index_is_built_once_by_concurrent_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LedgerConfig(max_entries_per_ledger=50, preallocate_bytes=0)
    ledger = _open(tmp_path / "t", config)
    positions = [ledger.append(bytes([i % 256]) * 100) for i in range(100)]
    ledger.close()
    ledger = _open(tmp_path / "t", config)
    builds: list[int] = []
    real_load = Segment._load_index

    def slow_load(segment: Segment) -> object:
        builds.append(segment.ledger_id)
        time.sleep(0.05)  # widen the window in which a second reader could start a scan
        return real_load(segment)

    monkeypatch.setattr(Segment, "_load_index", slow_load)
    results: list[list[Position]] = []
    barrier = threading.Barrier(6)

    def reader() -> None:
        barrier.wait()
        results.append([p for p, _ in ledger.read(positions[0], 100)])

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [positions] * 6
    assert sorted(builds) == [positions[0].ledger_id, positions[50].ledger_id]
    ledger.close()


def test_reads_from_threads_while_the_loop_appends_flushes_and_trims(tmp_path: Path) -> None:
    """What the broker does at once: disk threads read from wherever their subscription is,
    the loop appends, the flush thread flushes, housekeeping trims. Every read returns the bytes
    appended at its positions, in order, and reads never fail because a segment vanished."""
    config = LedgerConfig(
        max_entries_per_ledger=40, preallocate_bytes=0, cache_size_bytes=2000, retention_size_mb=0
    )
    appended: dict[Position, bytes] = {}
    rng = random.Random(9)
    ledger = _open(tmp_path / "t", config)
    ledger.open_cursor("sub", InitialPosition.Earliest)
    for _ in range(2000):  # sealed segments whose index is built by the first read
        data = rng.randbytes(rng.randint(1, 120))
        appended[ledger.append(data)] = data
    ledger.close()
    ledger = _open(tmp_path / "t", config)
    cursor = ledger.cursors["sub"]
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def following(position: Position) -> Position:
        if Position(position.ledger_id, position.entry_id + 1) in appended:
            return Position(position.ledger_id, position.entry_id + 1)
        # Over a copy: the main thread adds to ``appended`` meanwhile (list() of a dict is one
        # step under the GIL; iterating the dict itself can fail with "changed size").
        return min(p for p in list(appended) if p.ledger_id > position.ledger_id)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                start = ledger.first_position or BEFORE_EVERYTHING
                batch = ledger.read(start, rng.randint(1, 60), rng.choice([100, 1 << 20]))
                previous = None
                for position, data in batch:
                    assert appended[position] == data
                    if previous is not None and position != following(previous):
                        # Only what was trimmed meanwhile (consumed by every cursor) is skipped.
                        skipped = [p for p in list(appended) if previous < p < position]
                        assert max(skipped) < (ledger.first_position or BEFORE_EVERYTHING)
                    previous = position
                reads[0] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        for round_ in range(60):
            for _ in range(rng.randint(1, 30)):
                data = rng.randbytes(rng.randint(1, 120))
                appended[ledger.append(data)] = data
            last = ledger.flush()
            if last is not None:
                cursor.mark_delete(min(last, Position(last.ledger_id - 40 + round_, 0)))
                cursor.persist()
                ledger.trim()
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
    assert not errors
    assert reads[0] > 0
    assert ledger.stats()["segments"] < len({p.ledger_id for p in appended})  # it did trim
    ledger.close()


def test_a_segment_trimmed_while_a_reader_builds_its_index_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LedgerConfig(max_entries_per_ledger=10, preallocate_bytes=0, retention_size_mb=0)
    ledger = _open(tmp_path / "t", config)
    cursor = ledger.open_cursor("sub", InitialPosition.Earliest)
    positions = [ledger.append(bytes([i]) * 10) for i in range(30)]
    ledger.close()
    ledger = _open(tmp_path / "t", config)
    cursor = ledger.cursors["sub"]
    started, trimmed = threading.Event(), threading.Event()
    real_load = Segment._load_index

    def load_after_trim(segment: Segment) -> object:
        if segment.ledger_id == positions[0].ledger_id:
            started.set()
            assert trimmed.wait(10)
        return real_load(segment)

    monkeypatch.setattr(Segment, "_load_index", load_after_trim)
    result: list[list[Position]] = []
    reader = threading.Thread(
        target=lambda: result.append([p for p, _ in ledger.read(positions[0], 50)])
    )
    reader.start()
    assert started.wait(10)
    cursor.mark_delete(positions[9])  # the whole first segment is consumed
    cursor.persist()
    assert ledger.trim() == 1
    trimmed.set()
    reader.join(10)
    assert result == [positions[10:]]
    ledger.close()
