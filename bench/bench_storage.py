"""Storage benchmark: durable group-commit appends, recovery time, cold and cached reads.

Prints one JSON object. Figures measured in one run, on the file system holding ``--dir``:

* ``append``: for 100 B, 1 KiB and 100 KiB entries, loops of "append a batch, then one
  ``flush``" (one pwrite + one fdatasync per touched segment) for ``--seconds`` each; entries/s,
  MB/s of entry bytes, flushes/s. Printed beside the ``dd if=/dev/zero bs=1M count=512
  conv=fdatasync`` rate measured in the same run, with the ratio.
* ``recovery``: ``Ledger.open`` of ``--recovery-mib`` of sealed segments (1 KiB entries) with
  the page cache of the segment files dropped (``posix_fadvise(DONTNEED)``), with and without
  whole-segment crc verification, plus the crash-recovery scan of one unsealed active segment.
* ``read``: all entries of that ledger read back after a fresh open (cold: page cache dropped,
  indexes built by scanning) and entries read back from the entry cache right after appending.

Usage: ``python bench/bench_storage.py [--dir DIR] [--seconds 3] [--recovery-mib 1024]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.position import BEFORE_EVERYTHING

MIB = 1024 * 1024
ENTRY_SIZES = {"100B": 100, "1KiB": 1024, "100KiB": 100 * 1024}


def dd_fdatasync_mb_s(directory: Path) -> float:
    """MB/s (10^6) of ``dd ... bs=1M count=512 conv=fdatasync`` into ``directory``."""
    target = directory / "dd.bin"
    command = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=512", "conv=fdatasync"]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    target.unlink()
    match = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", result.stderr)
    if match:
        return int(match.group(1)) / float(match.group(2)) / 1e6
    return 512 * MIB / elapsed / 1e6


def bench_append(directory: Path, size: int, seconds: float, batch_bytes: int) -> dict[str, Any]:
    """Durable appends of ``size``-byte entries in group commits of about ``batch_bytes``."""
    config = LedgerConfig(preallocate_bytes=64 * MIB, max_size_per_ledger_bytes=256 * MIB)
    ledger = Ledger.open(directory, config)
    payload = os.urandom(size)
    batch = max(1, batch_bytes // size)
    entries = flushes = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(batch):
            ledger.append(payload)
        ledger.flush()
        entries += batch
        flushes += 1
    elapsed = time.perf_counter() - started
    ledger.close()
    shutil.rmtree(directory)
    return {
        "entry_bytes": size,
        "entries_per_flush": batch,
        "entries_per_s": round(entries / elapsed),
        "mb_per_s": round(entries * size / elapsed / 1e6, 1),
        "flushes_per_s": round(flushes / elapsed, 1),
    }


def drop_page_cache(directory: Path) -> None:
    """Evict the (clean) cached pages of every file under ``directory``; no root needed."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def build_ledger(directory: Path, total_bytes: int, entry_size: int) -> int:
    """Write ``total_bytes`` of entries and close (all segments sealed); returns the count."""
    ledger = Ledger.open(directory, LedgerConfig(preallocate_bytes=64 * MIB))
    payload = os.urandom(entry_size)
    count = total_bytes // entry_size
    for index in range(count):
        ledger.append(payload)
        if index % 8192 == 8191:
            ledger.flush()
    ledger.close()
    return count


def timed_open(directory: Path, config: LedgerConfig) -> tuple[float, Ledger]:
    drop_page_cache(directory)
    started = time.perf_counter()
    ledger = Ledger.open(directory, config)
    return time.perf_counter() - started, ledger


def bench_recovery_and_reads(directory: Path, total_bytes: int) -> dict[str, Any]:
    entry_size = 1024
    count = build_ledger(directory, total_bytes, entry_size)
    segments = len(list(directory.glob("*.seg")))
    verify_s, ledger = timed_open(directory, LedgerConfig())
    ledger.close()
    no_verify_s, ledger = timed_open(directory, LedgerConfig(verify_sealed_on_open=False))
    ledger.close()

    # Cold read: fresh open, page cache dropped, every sealed index built by a scan on demand.
    _, ledger = timed_open(directory, LedgerConfig(verify_sealed_on_open=False))
    started = time.perf_counter()
    read_entries = read_bytes = 0
    position = BEFORE_EVERYTHING
    while batch := ledger.read(position, 1000):
        read_entries += len(batch)
        read_bytes += sum(len(data) for _, data in batch)
        last = batch[-1][0]
        position = Position(last.ledger_id, last.entry_id + 1)
    cold_s = time.perf_counter() - started
    ledger.close()

    active = bench_active_scan(directory.parent / "active", 64 * MIB, entry_size)
    shutil.rmtree(directory)
    return {
        "recovery": {
            "data_mib": total_bytes // MIB,
            "entries": count,
            "segments": segments,
            "open_s_verify_crc": round(verify_s, 3),
            "open_s_no_verify": round(no_verify_s, 3),
            "active_segment_scan": active,
        },
        "read_cold": {
            "entries": read_entries,
            "seconds": round(cold_s, 3),
            "entries_per_s": round(read_entries / cold_s),
            "mb_per_s": round(read_bytes / cold_s / 1e6, 1),
        },
    }


def bench_active_scan(directory: Path, size: int, entry_size: int) -> dict[str, Any]:
    """Crash recovery of one unsealed segment of ``size`` bytes (record-by-record scan)."""
    config = LedgerConfig(max_entries_per_ledger=10**9, preallocate_bytes=size + MIB)
    ledger = Ledger.open(directory, config)
    payload = os.urandom(entry_size)
    for _ in range(size // entry_size):
        ledger.append(payload)
    ledger.flush()
    ledger._abandon()  # as if the process died: the segment stays unsealed
    seconds, ledger = timed_open(directory, config)
    ledger.close()
    shutil.rmtree(directory)
    return {"data_mib": size // MIB, "entries": size // entry_size, "open_s": round(seconds, 3)}


def bench_cached_read(directory: Path, total_bytes: int, entry_size: int) -> dict[str, Any]:
    config = LedgerConfig(cache_size_bytes=total_bytes + MIB, preallocate_bytes=64 * MIB)
    ledger = Ledger.open(directory, config)
    payload = os.urandom(entry_size)
    count = total_bytes // entry_size
    for _ in range(count):
        ledger.append(payload)
    ledger.flush()
    before = ledger.stats()["cache_misses"]
    started = time.perf_counter()
    read = 0
    position = BEFORE_EVERYTHING
    while batch := ledger.read(position, 1000):
        read += len(batch)
        last = batch[-1][0]
        position = Position(last.ledger_id, last.entry_id + 1)
    elapsed = time.perf_counter() - started
    misses = ledger.stats()["cache_misses"] - before
    ledger.close()
    shutil.rmtree(directory)
    return {
        "entries": read,
        "entry_bytes": entry_size,
        "cache_misses": misses,
        "entries_per_s": round(read / elapsed),
        "mb_per_s": round(read * entry_size / elapsed / 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (a temp dir)")
    parser.add_argument("--seconds", type=float, default=3.0, help="per append benchmark")
    parser.add_argument("--batch-bytes", type=int, default=256 * 1024, help="bytes per flush")
    parser.add_argument("--recovery-mib", type=int, default=1024, help="data for open/read")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir))
    try:
        dd = dd_fdatasync_mb_s(base)
        appends = {
            name: bench_append(base / f"append-{name}", size, args.seconds, args.batch_bytes)
            for name, size in ENTRY_SIZES.items()
        }
        for result in appends.values():
            result["ratio_to_dd"] = round(result["mb_per_s"] / dd, 3)
        report: dict[str, Any] = {
            "dd_fdatasync_mb_per_s": round(dd, 1),
            "append_group_commit": appends,
        }
        report.update(bench_recovery_and_reads(base / "recovery", args.recovery_mib * MIB))
        report["read_cached"] = bench_cached_read(base / "cached", 128 * MIB, 1024)
        report["python"] = sys.version.split()[0]
        report["cpus"] = os.cpu_count()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
