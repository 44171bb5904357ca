"""``Ledger.append_many``: the group commit's one call, equal to ``append`` entry by entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.storage import Ledger, LedgerConfig, Position
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer


def _open(directory: Path, config: LedgerConfig) -> Ledger:
    return Ledger.open(directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


ROLL_BY_COUNT = LedgerConfig(max_entries_per_ledger=2, preallocate_bytes=0)
# Segment header 20 B + records of 12 + 7..8 B: two or three entries per ledger, by bytes.
ROLL_BY_BYTES = LedgerConfig(max_size_per_ledger_bytes=64, preallocate_bytes=0)


@pytest.mark.parametrize("config", [ROLL_BY_COUNT, ROLL_BY_BYTES], ids=["by-count", "by-bytes"])
@pytest.mark.parametrize("group_sizes", [[5], [1, 1, 1, 1, 1], [2, 3], [4, 0, 1], [12]])
def test_positions_and_rolls_equal_single_appends(
    tmp_path: Path, config: LedgerConfig, group_sizes: list[int]
) -> None:
    """Rolls fall inside groups exactly where single appends put them."""
    single = _open(tmp_path / "single", config)
    grouped = _open(tmp_path / "grouped", config)
    try:
        entries = [f"entry-{i}".encode() for i in range(sum(group_sizes))]
        expected = [single.append(data) for data in entries]
        assert len({p.ledger_id for p in expected}) >= 2  # the case does roll
        got: list[Position] = []
        start = 0
        for size in group_sizes:
            got += grouped.append_many(entries[start : start + size])
            start += size
        assert got == expected
        assert grouped.last_position == expected[-1]
        assert grouped.flush() == expected[-1]
        assert grouped.read(expected[0], 100) == list(zip(expected, entries, strict=True))
    finally:
        single.close()
        grouped.close()


def test_an_oversized_entry_refuses_the_whole_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of a refused group is buffered: no entry of it can be flushed later."""
    monkeypatch.setattr("broker.storage.writer.MAX_ENTRY_BYTES", 10)
    ledger = _open(tmp_path / "t", LedgerConfig())
    try:
        with pytest.raises(ValueError, match="exceeds"):
            ledger.append_many([b"small", b"x" * 11, b"small"])
        assert ledger.last_position is None
        assert ledger.flush() is None
        assert ledger.append_many([b"ok"]) == [Position(1, 0)]
    finally:
        ledger.close()
