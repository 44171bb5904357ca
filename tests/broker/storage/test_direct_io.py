"""broker.storage.direct_io: large flushes written with O_DIRECT read back byte for byte, mixed
with page-cache flushes at any alignment, across rolls and reopen; a power cut loses nothing
reported durable; short writes, failed writes and a file system without O_DIRECT are handled."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from broker.storage import Ledger, LedgerConfig, LedgerFlushError, Position, direct_io, segment
from broker.storage.direct_io import BLOCK, DirectWriter
from broker.storage.files import FileLayer
from tests.broker.storage.faults import (
    InlineExecutor,
    NoSyncLayer,
    SimulatedCrash,
    SimulatedDisk,
)

BEFORE_EVERYTHING = Position(0, -1)


@pytest.fixture(autouse=True, params=["chunked", "whole"])
def every_flush_direct(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold at one block, so small test flushes take both paths; chunks of three
    blocks, so most flushes are written in several (or the default 4 MiB: in one)."""
    monkeypatch.setattr(DirectWriter, "min_bytes", BLOCK)
    if request.param == "chunked":
        monkeypatch.setattr(direct_io, "CHUNK_BYTES", 3 * BLOCK)


class CountingDirect(NoSyncLayer):
    """Counts writes through O_DIRECT descriptors; optional faults on them."""

    def __init__(
        self,
        *,
        short_by: int = 0,
        fail_next: int = 0,
        refuse: bool = False,
        refuse_writes: bool = False,
    ) -> None:
        self.direct_fds: set[int] = set()
        self.direct_writes = 0
        self.short_by = short_by
        self.fail_next = fail_next
        self.refuse = refuse
        self.refuse_writes = refuse_writes
        self.opens_refused = 0
        self.open_flags: list[int] = []

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if flags & os.O_DIRECT and self.refuse:
            self.opens_refused += 1
            raise OSError(errno.EINVAL, "no O_DIRECT here", str(path))
        self.open_flags.append(flags)
        fd = super().open(path, flags, mode)
        if flags & os.O_DIRECT:
            self.direct_fds.add(fd)
        return fd

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if fd in self.direct_fds:
            assert offset % BLOCK == 0
            assert len(data) % BLOCK == 0
            self.direct_writes += 1
            if self.refuse_writes:
                raise OSError(errno.EINVAL, "O_DIRECT open, but no O_DIRECT writes")
            if self.fail_next:
                self.fail_next -= 1
                raise OSError(errno.EIO, "injected")
            if self.short_by:
                cut = max(0, len(data) - self.short_by)
                return super().pwrite(fd, memoryview(data)[:cut], offset) if cut else 0
        return super().pwrite(fd, data, offset)

    def close(self, fd: int) -> None:
        self.direct_fds.discard(fd)
        super().close(fd)


def _config(**overrides: object) -> LedgerConfig:
    base: dict[str, object] = {
        "max_entries_per_ledger": 40,
        "preallocate_bytes": 64 * 1024,
        "direct_io": True,
    }
    base.update(overrides)
    return LedgerConfig(**base)  # type: ignore[arg-type]


def _workload(ledger: Ledger, rng: random.Random, flushes: int) -> dict[Position, bytes]:
    """Flushes of 1-6 entries of 0-20,000 bytes: some below the threshold, most above it."""
    written: dict[Position, bytes] = {}
    for _ in range(flushes):
        for _ in range(rng.randint(1, 6)):
            data = rng.randbytes(rng.choice([0, 7, 100, 3000, 9000, 20_000]))
            written[ledger.append(data)] = data
        ledger.flush()
    return written


def test_direct_and_page_cache_flushes_read_back_across_rolls_and_reopen(tmp_path: Path) -> None:
    layer = CountingDirect()
    rng = random.Random(1)
    ledger = Ledger.open(tmp_path / "t", _config(), file_layer=layer, preallocator=InlineExecutor())
    written = _workload(ledger, rng, 120)
    assert dict(ledger.iter_entries(BEFORE_EVERYTHING)) == written
    ledger.close()
    assert layer.direct_writes > 50
    reopened = Ledger.open(tmp_path / "t", _config(verify_sealed_on_open=True))
    assert dict(reopened.iter_entries(BEFORE_EVERYTHING)) == written
    reopened.close()


def test_a_short_direct_write_is_finished_through_the_page_cache(tmp_path: Path) -> None:
    layer = CountingDirect(short_by=BLOCK)  # O_DIRECT writes whole blocks, short or not
    ledger = Ledger.open(tmp_path / "t", _config(), file_layer=layer, preallocator=InlineExecutor())
    written = _workload(ledger, random.Random(2), 30)
    ledger.close()
    assert layer.direct_writes > 10
    reopened = Ledger.open(tmp_path / "t", _config())
    assert dict(reopened.iter_entries(BEFORE_EVERYTHING)) == written
    reopened.close()


def test_a_failed_direct_write_fails_that_flush_only(tmp_path: Path) -> None:
    layer = CountingDirect()
    rng = random.Random(3)
    ledger = Ledger.open(tmp_path / "t", _config(), file_layer=layer, preallocator=InlineExecutor())
    kept = _workload(ledger, rng, 5)
    layer.fail_next = 1
    ledger.append(rng.randbytes(9000))
    with pytest.raises(LedgerFlushError):
        ledger.flush()
    kept.update(_workload(ledger, rng, 5))  # written after the failure, at the same durable end
    assert dict(ledger.iter_entries(BEFORE_EVERYTHING)) == kept
    ledger.close()
    reopened = Ledger.open(tmp_path / "t", _config())
    assert dict(reopened.iter_entries(BEFORE_EVERYTHING)) == kept
    reopened.close()


@pytest.mark.parametrize("refused", ["open", "write"])
def test_without_o_direct_the_page_cache_is_used_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, refused: str
) -> None:
    """A file system refusing O_DIRECT at open, or accepting the open and refusing every write
    with EINVAL (nothing written): no flush fails, each segment's writer tries once and the
    pre-allocation once for the folder, it is said once."""
    monkeypatch.setattr(direct_io, "_unsupported_logged", False)
    monkeypatch.setattr(direct_io, "_refusing_folders", set())
    layer = CountingDirect(refuse=refused == "open", refuse_writes=refused == "write")
    ledger = Ledger.open(tmp_path / "t", _config(), file_layer=layer, preallocator=InlineExecutor())
    with caplog.at_level("INFO", logger="broker.storage.direct_io"):
        written = _workload(ledger, random.Random(4), 100)  # several segments
    assert dict(ledger.iter_entries(BEFORE_EVERYTHING)) == written
    ledger.close()
    segments = len(list((tmp_path / "t").glob("*.seg")))
    tries = layer.opens_refused if refused == "open" else layer.direct_writes
    assert 2 <= tries <= segments + 1  # once per segment, once for the zero fills
    if refused == "open":
        assert layer.direct_writes == 0
    said = "has no O_DIRECT" if refused == "open" else "refuses O_DIRECT"
    assert sum(said in r.getMessage() for r in caplog.records) == 1
    reopened = Ledger.open(tmp_path / "t", _config())
    assert dict(reopened.iter_entries(BEFORE_EVERYTHING)) == written
    reopened.close()


def test_switched_off_no_o_direct_descriptor_is_opened(tmp_path: Path) -> None:
    layer = CountingDirect()
    config = _config(direct_io=False)
    ledger = Ledger.open(tmp_path / "t", config, file_layer=layer, preallocator=InlineExecutor())
    _workload(ledger, random.Random(5), 20)
    ledger.close()
    assert layer.direct_writes == 0
    assert not any(flags & os.O_DIRECT for flags in layer.open_flags)


@pytest.mark.parametrize("seed", range(60))
def test_power_loss_never_loses_an_entry_reported_durable(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    config = _config(
        max_entries_per_ledger=rng.choice([3, 10, 40]),
        preallocate_bytes=rng.choice([0, 4096, 64 * 1024]),
    )
    disk = SimulatedDisk(rng, crash_after=rng.randint(1, 120))
    appended: dict[Position, bytes] = {}
    durable: dict[Position, bytes] = {}
    ledger: Ledger | None = None
    try:
        ledger = Ledger.open(tmp_path / "t", config, file_layer=disk, preallocator=InlineExecutor())
        for _ in range(40):
            for _ in range(rng.randint(1, 4)):
                data = rng.randbytes(rng.choice([5, 500, 5000, 12_000]))
                appended[ledger.append(data)] = data
            last = ledger.flush()
            durable.update((p, d) for p, d in appended.items() if last is not None and p <= last)
        disk.cut_power()
    except SimulatedCrash:
        pass
    finally:
        if ledger is not None:
            ledger._abandon()
    recovered = Ledger.open(tmp_path / "t", config, file_layer=NoSyncLayer())
    try:
        got = dict(recovered.iter_entries(BEFORE_EVERYTHING))
        for position, data in got.items():
            assert appended[position] == data, f"phantom or altered entry at {position}"
        assert all(got.get(p) == d for p, d in durable.items())
    finally:
        recovered.close()


def test_the_layer_sees_every_direct_write(tmp_path: Path) -> None:
    """Fault-injecting layers rely on it: the O_DIRECT descriptor comes from the layer."""
    seen: list[int] = []

    class Watch(NoSyncLayer):
        def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
            seen.append(flags & os.O_DIRECT)
            return super().open(path, flags, mode)

    layer: FileLayer = Watch()
    ledger = Ledger.open(tmp_path / "t", _config(), file_layer=layer, preallocator=InlineExecutor())
    _workload(ledger, random.Random(6), 10)
    ledger.close()
    assert any(seen)


@pytest.mark.parametrize(
    ("start", "end"), [(0, 64 * 1024), (100, 3 * BLOCK + 5), (BLOCK, 2 * BLOCK)]
)
def test_zero_fills_write_whole_blocks_with_o_direct(tmp_path: Path, start: int, end: int) -> None:
    """Pre-allocation's zeros bypass the page cache too: the whole blocks through O_DIRECT
    (aligned: the layer checks), the partial ones around them through the page cache; every byte
    of the range is zero afterwards and no byte outside it changed."""
    path = tmp_path / "seg"
    path.write_bytes(b"\xff" * (end + BLOCK))
    layer = CountingDirect()
    fd = layer.open(path, os.O_RDWR)
    try:
        assert segment._zero_fill(layer, fd, start, end - start, path) == end
    finally:
        layer.close(fd)
    data = path.read_bytes()
    assert data == b"\xff" * start + bytes(end - start) + b"\xff" * BLOCK
    assert (
        layer.direct_writes == (end - end % BLOCK - -(-start // BLOCK) * BLOCK) // (1024 * 1024) + 1
    )


def test_spares_are_zero_filled_with_o_direct_only_when_switched_on(tmp_path: Path) -> None:
    for direct in (True, False):
        layer = CountingDirect()
        path = tmp_path / f"spare-{direct}"
        segment.preallocate_file(layer, path, 64 * 1024, direct)
        assert path.read_bytes() == bytes(64 * 1024)
        assert (layer.direct_writes > 0) is direct
