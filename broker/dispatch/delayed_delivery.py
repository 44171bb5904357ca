"""Delayed delivery: entries held back until their ``deliver_at_time``.

The dispatch loop asks here before sending an entry whose metadata names a delivery time (Shared
and Key_Shared subscriptions only, and only with ``DispatchLimits.delayed_delivery``). An entry
not yet due is tracked instead of sent; a timer hands the due ones back, which the dispatcher
queues for replay, so they go out in position order with the other redeliveries. Like the replay
queue, this is rebuilt from the cursor after a restart: the entries are read and held back again.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from broker.dispatch.entry_loader import Scheduler, TimerHandle
from broker.storage import Position


class DelayedDeliveries:
    """The entries one subscription holds back, earliest due first."""

    def __init__(self, scheduler: Scheduler, on_due: Callable[[list[Position]], None]) -> None:
        """``on_due`` receives the entries whose time has come, in due order."""
        self._scheduler = scheduler
        self._on_due = on_due
        self._due: list[tuple[int, Position]] = []  # heap of (deliver_at_ms, position)
        #: the entries held back (the dispatch loop skips them)
        self.positions: set[Position] = set()
        self._timer: TimerHandle | None = None

    def defer(self, position: Position, deliver_at_ms: int) -> bool:
        """Whether ``position`` must wait (its time has not come); tracked from the first ask."""
        now_ms = int(time.time() * 1000)
        if deliver_at_ms <= now_ms:
            return False
        if position not in self.positions:
            self.positions.add(position)
            heapq.heappush(self._due, (deliver_at_ms, position))
            self._arm_timer()
        return True

    def clear(self) -> None:
        self._due.clear()
        self.positions.clear()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self._due:
            self._timer = None
            return
        wait = max(0.0, self._due[0][0] / 1000 - time.time())
        # Wake no later than the earliest due entry, in ticks no finer than the configured one.
        wait = max(wait, 0.001)
        self._timer = self._scheduler.call_later(wait, self._release)

    def _release(self) -> None:
        self._timer = None
        now_ms = int(time.time() * 1000)
        due = []
        while self._due and self._due[0][0] <= now_ms:
            _, position = heapq.heappop(self._due)
            self.positions.discard(position)
            due.append(position)
        self._arm_timer()
        self._on_due(due)
