"""Arrow memory an exactly-once task hands on to the batches that arrive after it.

An exactly-once task holds every row until its last one arrives (``row_order``). Spark's
Python worker reads each Arrow batch into memory Arrow's allocator takes from its free pages;
the at-least-once sink drops a batch once sent, so each batch read reuses the pages the one
before it freed, while the sorter holds them all: every page of its rows is a new one, and a
page fault (about 2 500 per 100k rows of 100 B, measured in the worker; as much CPU as the
sort). Freed at the task's end, those pages go back to the system after a short delay
(Arrow's allocator returns memory it does not reuse soon), so the next task faults again.

So the sorter does not drop the batches it is done with (after a spill, or at the task's end):
it hands them to ``CarryOver``, which drops them one at a time as later batches arrive (the
same task's after a spill, the next task's). Each batch read then finds the pages the carried
one just freed, as the at-least-once sink's does: no copy, no new page. ``CarryOver`` holds at
most ``RETAINED_BYTES`` between tasks (a task's first batches up to it); past that, batches are
dropped at once, as before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator

import pyarrow as pa

__all__ = ["RETAINED_BYTES", "CarryOver", "carry_over"]

# Held between tasks, per worker process at most: a task of 500k rows of 100 B holds ~52 MB.
RETAINED_BYTES = 64 << 20


class CarryOver:
    """Batches no longer needed, dropped as others arrive (see the module docstring)."""

    def __init__(self, retained_bytes: int = RETAINED_BYTES) -> None:
        self.retained_bytes = retained_bytes
        self._carried: deque[tuple[pa.RecordBatch, int]] = deque()
        self.held = 0  # bytes of the batches carried
        self._lock = threading.Lock()

    def hand_over(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Carry ``batches`` until later ones arrive, up to ``retained_bytes`` in all (the
        rest is dropped now)."""
        with self._lock:
            for batch in batches:
                size = batch.nbytes
                if self.held + size > self.retained_bytes:
                    break
                self._carried.append((batch, size))
                self.held += size

    def arrived(self, size: int) -> None:
        """A batch of ``size`` bytes was read: drop carried batches of as many bytes (the
        oldest first), whose pages then serve the next batch read."""
        dropped: list[pa.RecordBatch] = []
        with self._lock:
            freed = 0
            while self._carried and freed < size:
                batch, batch_size = self._carried.popleft()
                dropped.append(batch)
                freed += batch_size
            self.held -= freed
        dropped.clear()  # freed here, outside the lock

    def passing(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` as they come, each dropping as many carried bytes (`arrived`): the
        at-least-once sink's, so that a task of it after an exactly-once one reuses the carried
        pages too and leaves nothing held."""
        for batch in batches:
            self.arrived(batch.nbytes)
            yield batch

    def clear(self) -> None:
        """Drop every batch carried."""
        with self._lock:
            carried, self._carried = self._carried, deque()
            self.held = 0
        carried.clear()


# The worker's: one task at a time runs in a Python worker, each hands on to the next.
carry_over = CarryOver()
