"""Segment pre-allocation scales with the data: a topic that takes a few entries zero-fills
64 KiB, not 8 MiB (10,000 such topics would write 80 GB of zeros), and a busy segment soon
has its headroom as large as its data, up to the configured pre-allocation."""

from __future__ import annotations

from pathlib import Path

from broker.storage import Ledger, LedgerConfig
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

KIB = 1024
MIB = 1024 * KIB


def _open(directory: Path) -> Ledger:
    return Ledger.open(
        directory, LedgerConfig(), file_layer=NoSyncLayer(), preallocator=InlineExecutor()
    )


def _segment_size(directory: Path) -> int:
    (segment,) = directory.glob("*.seg")
    return segment.stat().st_size


def test_a_few_entries_cost_a_small_file(tmp_path: Path) -> None:
    assert LedgerConfig().preallocate_bytes == 8 * MIB
    ledger = _open(tmp_path / "t")
    for _ in range(20):
        ledger.append(b"x" * 100)
    ledger.flush()
    assert _segment_size(tmp_path / "t") <= 64 * KIB
    ledger.close()


def test_a_busy_segment_gets_headroom_as_large_as_its_data(tmp_path: Path) -> None:
    ledger = _open(tmp_path / "t")
    data = 0
    for _ in range(4):
        for _ in range(256):
            ledger.append(b"y" * 1000)
        ledger.flush()
        data += 256 * 1000
    size = _segment_size(tmp_path / "t")
    assert size - data >= data // 2  # pre-allocated ahead: the next writes extend nothing
    assert size <= 3 * data + 64 * KIB
    for _ in range(16):  # up to ~17 MB: the headroom stops growing at the configured 8 MiB
        for _ in range(1000):
            ledger.append(b"z" * 1000)
        ledger.flush()
    data += 16 * 1000 * 1000
    size = _segment_size(tmp_path / "t")
    # A chunk is added when less than half of one is left: headroom of 0.5 to 1.5 chunks.
    assert 4 * MIB <= size - data <= 12 * MIB + 64 * KIB
    ledger.close()
