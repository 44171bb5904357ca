"""Machine limits measured in the same run as the broker figures (the virtual disk is noisy).

* ``dd conv=fdatasync``: sequential write of ``size_mib`` MiB with one fdatasync at the end;
* append + fdatasync/s: 4 KiB ``os.write`` to a growing file then ``os.fdatasync``, in a loop;
* cold read: ``posix_fadvise(POSIX_FADV_DONTNEED)`` on each file (after an fsync, so the pages
  are clean and really dropped), then ``dd bs=1M`` of the files to /dev/null;
* load: CPU used by processes other than the suite, sampled every 10 s while it runs.

All files go to a temporary directory on the filesystem that holds the broker's data.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def dd_fdatasync_mb_s(directory: Path, size_mib: int) -> float:
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        target = Path(scratch) / "dd.bin"
        os.sync()
        started = time.perf_counter()
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={size_mib}", "conv=fdatasync"],
            check=True,
            capture_output=True,
        )
        return size_mib * MIB / (time.perf_counter() - started) / 1e6


def append_fdatasync_per_s(directory: Path, seconds: float, block: int = 4096) -> float:
    data = b"\x5a" * block
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        fd = os.open(Path(scratch) / "append.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            count = 0
            started = time.perf_counter()
            deadline = started + seconds
            while time.perf_counter() < deadline:
                os.write(fd, data)
                os.fdatasync(fd)
                count += 1
            return count / (time.perf_counter() - started)
        finally:
            os.close(fd)


def drop_from_page_cache(paths: Iterable[Path]) -> None:
    """Make the next read of ``paths`` come from the disk ("cold"), without root-only knobs."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages are not dropped: write them first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_dd_read_mb_s(paths: list[Path]) -> float:
    drop_from_page_cache(paths)
    total = sum(path.stat().st_size for path in paths)
    started = time.perf_counter()
    for path in paths:
        subprocess.run(
            ["dd", f"if={path}", "of=/dev/null", "bs=1M"], check=True, capture_output=True
        )
    return total / (time.perf_counter() - started) / 1e6


def _cpu_ticks_by_process() -> dict[int, tuple[int, int, str]]:
    """pid -> (utime + stime ticks, parent pid, command line)."""
    ticks: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        # After "pid (comm)": ppid is field 4, utime 14 and stime 15 (1-based, man 5 proc).
        ticks[int(entry.name)] = (int(fields[11]) + int(fields[12]), int(fields[1]), command[:100])
    return ticks


def load_snapshot(seconds: float = 1.0) -> dict[str, Any]:
    """CPU used over ``seconds`` by processes that are not this suite (this process and the
    brokers it started), in % of one core (200 = both cores), with the busiest of them: other
    engineers' test runs on a shared machine show up here."""
    before = _cpu_ticks_by_process()
    time.sleep(seconds)
    after = _cpu_ticks_by_process()
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    ours = os.getpid()
    others = sorted(
        (
            ((ticks - before[pid][0]) / ticks_per_s / seconds * 100, command.strip())
            for pid, (ticks, parent, command) in after.items()
            if pid in before and pid != ours and parent != ours
        ),
        reverse=True,
    )
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_1_5_15": [round(value, 2) for value in os.getloadavg()],
        "others_cpu_percent": round(sum(pct for pct, _ in others)),
        "busiest_others": [[round(pct), command] for pct, command in others[:3] if pct >= 5],
    }


class LoadMonitor:
    """Samples ``load_snapshot`` every ``interval`` seconds in a thread while the suite runs."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(load_snapshot())
            self._stop.wait(self.interval)

    def __enter__(self) -> LoadMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        others = [sample["others_cpu_percent"] for sample in self.samples]
        return {
            "others_cpu_percent_median": statistics.median(others) if others else 0,
            "others_cpu_percent_max": max(others, default=0),
            "samples": self.samples,
        }


def describe() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(total_kib / MIB, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
