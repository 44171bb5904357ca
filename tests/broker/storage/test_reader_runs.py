"""Reads of a run of entries (``reader.EntryReader.read`` over ``Segment.read_entries``).

A read's limits are planned by bisection over the offset index and each segment's run comes
from one ``pread`` split in one pass; the result must be what a step-by-step walk of the log
gives, on generated entry sizes, limits and start positions, across segments, with the cache
on and off. The read also tells the kernel what comes next (``POSIX_FADV_WILLNEED``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage import Ledger, LedgerConfig, Position
from broker.storage import segment as segment_module
from broker.storage.errors import CorruptLedgerError
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer


def walk(
    log: list[tuple[Position, bytes]], start: int, max_entries: int, max_bytes: int
) -> list[tuple[Position, bytes]]:
    """The read's contract, one entry at a time: in order from ``start``, up to
    ``max_entries``, stopping before the entry that would pass ``max_bytes`` (the first entry
    always comes, however large)."""
    taken: list[tuple[Position, bytes]] = []
    budget = max_bytes
    for position, data in log[start:]:
        if len(taken) >= max_entries or (len(data) > budget and taken):
            break
        taken.append((position, data))
        budget -= len(data)
    return taken


def open_ledger(directory: Path, cache_bytes: int) -> Ledger:
    config = LedgerConfig(
        preallocate_bytes=0, max_entries_per_ledger=7, cache_size_bytes=cache_bytes
    )
    return Ledger.open(directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=40),
    st.data(),
    st.sampled_from([0, 1 << 20]),
)
def test_a_read_is_the_walk_of_the_log(sizes: list[int], data: st.DataObject, cache: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        ledger = open_ledger(Path(directory), cache)
        try:
            log = []
            for index, size in enumerate(sizes):
                entry = bytes([index % 251]) * size
                log.append((ledger.append(entry), entry))
                if index % 5 == 4:
                    ledger.flush()  # several flushes: cache blocks and segments of any shape
            ledger.flush()
            for _ in range(5):
                start = data.draw(st.integers(0, len(log) - 1))
                max_entries = data.draw(st.integers(1, 50))
                max_bytes = data.draw(st.integers(0, 5000))
                expected = walk(log, start, max_entries, max_bytes)
                assert ledger.read(log[start][0], max_entries, max_bytes) == expected
        finally:
            ledger.close()


def test_a_read_asks_the_kernel_to_read_ahead_what_comes_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advice: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, kind: int) -> None:
        advice.append((offset, length, kind))
        real(fd, offset, length, kind)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    ledger = open_ledger(tmp_path / "topic", cache_bytes=0)
    try:
        positions = [ledger.append(b"x" * 100) for _ in range(6)]
        ledger.flush()
        assert [p for p, _ in ledger.read(positions[0], 2)] == positions[:2]
        record = 8 + 100
        start = segment_module.HEADER_SIZE
        assert (start, 2 * record, os.POSIX_FADV_SEQUENTIAL) in advice
        # Twice the read ahead of it, as far as the data goes.
        assert (start + 2 * record, 4 * record, os.POSIX_FADV_WILLNEED) in advice
        advice.clear()
        ledger.read(positions[4], 5)  # the last entries: nothing left to read ahead
        assert [kind for _, _, kind in advice] == [os.POSIX_FADV_SEQUENTIAL]
    finally:
        ledger.close()


def test_a_damaged_record_in_a_run_is_reported_where_it_lies(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path / "topic", cache_bytes=0)
    try:
        positions = [ledger.append(bytes([i]) * 50) for i in range(4)]
        ledger.flush()
        (segment_file,) = ledger.segment_paths()
        record = 8 + 50
        damaged = segment_module.HEADER_SIZE + 2 * record + 8 + 10  # inside entry 2
        with open(segment_file, "r+b") as handle:
            handle.seek(damaged)
            handle.write(b"\xff")
        with pytest.raises(CorruptLedgerError) as caught:
            ledger.read(positions[0], 4)
        assert caught.value.offset == segment_module.HEADER_SIZE + 2 * record
    finally:
        ledger.close()
