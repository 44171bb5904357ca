"""Where a subscription's dispatch gets its entries: from memory at once, from disk off the loop.

Dispatch runs on the event loop and must never wait for the disk (``broker/blocking.py``). The
hot path, a consumer tailing the topic, is served synchronously from the ledger's entry cache
(``read_cached``). Anything else (a consumer catching up on old data, a redelivery of an entry
the cache no longer holds, the first read of a sealed segment) is a *cold read*: it runs in a
disk thread, dispatch stops for now, and when the read completes its entries are kept here as
the current *run* and dispatch is scheduled again, finding them in memory this time.

Rules this module keeps:

1. At most one disk read per subscription is in flight, and it asks for no more entries than
   the consumers have permits for (``read_budget``), like Java's dispatcher, and at most
   ``DISK_READ_BATCHES`` dispatch batches and ``DISK_READ_BYTES`` (or
   ``dispatcherMaxReadSizeBytes`` if smaller): small entries are read many batches at a time
   (a read of 100 entries of 100 bytes is mostly the hop to a disk thread), while dispatch
   still takes one batch of them per turn from the run (issue #24's turn budget).
2. A read started before a seek/reset (``invalidate``) or a close is *stale*: its result is
   dropped when it arrives, and only then may the next read start (rule 1 again).
3. The run is the contiguous sequence of entries from the read's start position, so it answers
   for every position in its range: a replay position inside the range but missing from it
   was trimmed. Only the latest run is kept (memory: one read, at most
   ``dispatcherMaxReadSizeBytes``), and only until new dispatch has moved past it.
4. Entries a consumer could not take yet (Key_Shared: the key's consumer is full) are *held*
   until delivered or acknowledged, so later reads never have to fetch them again: each read is
   used by the dispatch pass that follows it, and dispatch makes progress instead of trading
   one run for another.
5. A failed read (I/O error, crc mismatch) is logged (rate-limited) and retried after
   ``RETRY_DELAY_S``; nothing is delivered in between, so nothing is skipped.
"""

from __future__ import annotations

import functools
import logging
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol

from broker.logging_setup import RateLimitedLog
from broker.storage import Position

log = logging.getLogger(__name__)
# A read that keeps failing is retried every second: a few lines per subscription and minute.
_failure_log = RateLimitedLog(log, limit=5, interval=60.0)

#: Seconds before a failed disk read is tried again.
RETRY_DELAY_S = 1.0
UNLIMITED_BYTES = 1 << 62
#: A disk read asks for at most this many dispatch batches of entries (bytes bound it too).
DISK_READ_BATCHES = 10
#: ... and at most this many bytes: enough for the disk to stream (the segment read asks the
#: kernel to read ahead past it), small enough that the first entries of a cold read go out
#: soon and the run held in memory stays small.
DISK_READ_BYTES = 1 << 20


class _Pending(Enum):
    ON_DISK = "on disk"


#: ``EntryLoader.entry``'s answer when the entry has to come from disk first.
ON_DISK: Literal[_Pending.ON_DISK] = _Pending.ON_DISK

Entries = list[tuple[Position, bytes]]


class PendingRead(Protocol):
    """A read running off the event loop (an ``asyncio.Future`` in the broker); its callbacks
    run on the event loop."""

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def result(self) -> Entries: ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class EntryReads(Protocol):
    """The two ways to read a topic's durable entries (implemented by
    ``broker.topics.topic.Topic``)."""

    def read_cached(self, position: Position, max_entries: int, max_bytes: int) -> Entries | None:
        """``Ledger.read_cached``: memory only; None when the disk is needed."""
        ...

    def read_from_disk(self, position: Position, max_entries: int, max_bytes: int) -> PendingRead:
        """``Ledger.read`` in a disk thread."""
        ...


@dataclass(slots=True)
class _Run:
    """The entries of the latest disk read, in position order: contiguous from the first entry
    at ``start``. Dispatch takes them a batch at a time from the front, so a batch is found by
    bisection and sliced, never by a walk over the whole run."""

    start: Position
    items: Entries
    last: Position | None = field(init=False)
    _by_position: dict[Position, bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.last = self.items[-1][0] if self.items else None

    def covers(self, position: Position) -> bool:
        """Whether the run is the authority on ``position``: every position in its range that
        will ever be durable already was when it was read (positions become durable in order)."""
        return self.last is not None and self.start <= position <= self.last

    def get(self, position: Position) -> bytes | None:
        """The entry at ``position`` if the run holds it (replays; the map is built once)."""
        if self._by_position is None:
            self._by_position = dict(self.items)
        return self._by_position.get(position)

    def from_position(self, position: Position, max_entries: int) -> Entries:
        """The run's entries at and after ``position``, if the run continues from there."""
        index = bisect_left(self.items, (position,))
        found = index < len(self.items) and self.items[index][0] == position
        if not found and position != self.start:
            return []
        return self.items[index : index + max_entries]


class EntryLoader:
    """The entries one subscription dispatches: cached, held, or from its latest disk read."""

    def __init__(
        self,
        name: str,
        source: EntryReads,
        scheduler: Scheduler,
        on_loaded: Callable[[], None],
        read_budget: Callable[[], int],
        *,
        max_entries: int,
        max_bytes: int,
    ) -> None:
        """``on_loaded`` is called (on the loop) when a disk read completes, was dropped as
        stale, or should be retried: dispatch again. ``read_budget``: how many entries a disk
        read should ask for now."""
        self._name = name
        self._source = source
        self._scheduler = scheduler
        self._on_loaded = on_loaded
        self._read_budget = read_budget
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._run: _Run | None = None
        self._held: dict[Position, bytes] = {}
        self._in_flight: PendingRead | None = None
        self._epoch = 0
        self._closed = False

    def batch(self, position: Position) -> Entries | None:
        """Entries from ``position`` on for new dispatch: ``[]`` past the end, None while they
        are being read from disk (dispatch resumes through ``on_loaded``)."""
        run = self._run
        if run is not None:
            found = run.from_position(position, self._max_entries)
            if found:
                return found
            if run.last is None or position > run.last:
                self._run = None  # dispatched past it: do not keep its bytes
        cached = self._source.read_cached(position, self._max_entries, self._max_bytes)
        if cached is None:
            self._read_from_disk(position)
        return cached

    def entry(self, position: Position) -> bytes | Literal[_Pending.ON_DISK] | None:
        """The entry at ``position`` for a redelivery: its bytes, None if it is no longer
        stored (trimmed), or ``ON_DISK`` while it is being read."""
        held = self._held.get(position)
        if held is not None:
            return held
        if self._run is not None and self._run.covers(position):
            return self._run.get(position)
        cached = self._source.read_cached(position, 1, UNLIMITED_BYTES)
        if cached is None:
            self._read_from_disk(position)
            return ON_DISK
        return cached[0][1] if cached and cached[0][0] == position else None

    def hold(self, position: Position, entry: bytes) -> None:
        """Keep ``entry`` until ``release``: no consumer could take it yet (rule 4)."""
        self._held[position] = entry

    def release(self, position: Position) -> None:
        """``position`` was delivered or acknowledged."""
        self._held.pop(position, None)

    def invalidate(self) -> None:
        """The subscription was reset (seek): forget every entry, drop the read in flight."""
        self._epoch += 1
        self._run = None
        self._held.clear()

    def close(self) -> None:
        self.invalidate()
        self._closed = True

    # ------------------------------------------------------------------ disk reads

    def _read_from_disk(self, position: Position) -> None:
        if self._in_flight is not None or self._closed:
            return  # rule 1: the completion of the one in flight dispatches again
        budget = max(1, min(self._max_entries * DISK_READ_BATCHES, self._read_budget()))
        pending = self._source.read_from_disk(
            position, budget, min(self._max_bytes, DISK_READ_BYTES)
        )
        self._in_flight = pending
        pending.add_done_callback(functools.partial(self._read_done, self._epoch, position))

    def _read_done(self, epoch: int, start: Position, pending: PendingRead) -> None:
        if self._in_flight is pending:
            self._in_flight = None
        # Retrieved even when dropped: asyncio logs a future's error nobody looked at.
        exc = None if pending.cancelled() else pending.exception()
        if self._closed:
            return
        if epoch != self._epoch or pending.cancelled():
            self._on_loaded()  # rule 2: stale, dropped; read again for the new position
            return
        if exc is not None:
            _failure_log.log(
                logging.ERROR,
                (self._name, id(self)),
                "subscription %r: reading from %s:%s failed (retrying in %.0f s): %s",
                self._name,
                start.ledger_id,
                start.entry_id,
                RETRY_DELAY_S,
                exc,
            )
            self._scheduler.call_later(RETRY_DELAY_S, self._on_loaded)
            return
        self._run = _Run(start, pending.result())
        self._on_loaded()
