"""The broker under test: a subprocess pinned to CPU 0; its CPU time and RSS from /proc.

``tests.helpers.BrokerProcess`` starts ``python -m broker standalone``; the child inherits the
CPU affinity of the thread that forks it, so the calling thread is moved to CPU 0 for the start
and to the generator's CPU 1 afterwards (every thread the broker starts later inherits CPU 0).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import BrokerProcess

BROKER_CPU = 0
GENERATOR_CPU = 1
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def pin_generator() -> None:
    """Pin this thread (and the threads it starts later) to the generator's CPU."""
    os.sched_setaffinity(0, {GENERATOR_CPU})


def start_pinned(data_dir: Path, *settings: str) -> BrokerProcess:
    os.sched_setaffinity(0, {BROKER_CPU})
    try:
        return BrokerProcess(data_dir, *settings).start()
    finally:
        pin_generator()


def pid_of(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return broker.proc.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
