"""Test-only fault injection, driven by one-shot marker files (option ``testing.faultDir``).

The connector's own tests need failures at exact points inside Spark's worker processes, which
they cannot reach otherwise. Without the option nothing here does anything. Markers (each is
deleted when it fires, so a retry or a restart runs clean):

* ``write-b{batch}-p{partition}`` holding ``k``: the sink task sends ``k`` rows, waits for their
  receipts, then raises (a task failing mid-write);
* ``pause-b{batch}-p{partition}`` holding ``k``: after sending ``k`` rows (receipts not awaited)
  the task renames it ``paused-...`` and waits for ``resume-...`` to appear (the test kills and
  restarts the broker meanwhile);
* ``commit-b{batch}``: the sink's driver-side ``commit`` raises after the writes succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["InjectedFault", "commit_fault", "row_fault"]

_PAUSE_LIMIT_SECONDS = 120.0


class InjectedFault(RuntimeError):
    """A failure a test asked for."""


def _take(marker: Path) -> int | None:
    """The marker's number if it exists (and delete it: one shot)."""
    try:
        text = marker.read_text()
        marker.unlink()
    except FileNotFoundError:
        return None
    return int(text.strip() or 0)


def row_fault(
    fault_dir: str | None, batch_id: int, partition: int
) -> Callable[[int, Callable[[], None]], None] | None:
    """A hook ``hook(rows_sent, flush)`` for the write loop, or None when no marker applies."""
    if fault_dir is None:
        return None
    directory = Path(fault_dir)
    suffix = f"b{batch_id}-p{partition}"
    fail_at = _take(directory / f"write-{suffix}")
    pause_marker = directory / f"pause-{suffix}"
    pause_at = int(pause_marker.read_text().strip()) if pause_marker.exists() else None
    if fail_at is None and pause_at is None:
        return None

    def hook(rows_sent: int, flush: Callable[[], None]) -> None:
        if rows_sent == fail_at:
            flush()
            raise InjectedFault(f"injected failure after {rows_sent} rows ({suffix})")
        if rows_sent == pause_at:
            pause_marker.rename(directory / f"paused-{suffix}")
            resume = directory / f"resume-{suffix}"
            deadline = time.monotonic() + _PAUSE_LIMIT_SECONDS
            while not resume.exists():
                if time.monotonic() > deadline:
                    raise InjectedFault(f"no {resume.name} within {_PAUSE_LIMIT_SECONDS} s")
                time.sleep(0.05)
            resume.unlink()

    return hook


def commit_fault(fault_dir: str | None, batch_id: int) -> None:
    """Raise once if ``commit-b{batch_id}`` exists."""
    if fault_dir is not None and _take(Path(fault_dir) / f"commit-b{batch_id}") is not None:
        raise InjectedFault(f"injected sink commit failure (batch {batch_id})")
