"""When a consumer asks for messages again: negative acknowledgements, and the unacked timeout.

``negative_acknowledge`` makes an entry due after ``negative_ack_redelivery_delay_ms``; with
``unacked_messages_timeout_ms`` > 0 an entry handed out and not acknowledged in time is due
too. One timer, armed for the earliest entry due, calls the consumer back, which takes what is
due (``pop_due``) and asks the broker for it; what it asks, and how, depends on the
subscription type, so it stays with the consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from client.acks import EntryKey

__all__ = ["RedeliveryTimers"]


class RedeliveryTimers:
    """Entries due for redelivery, by when; ``on_due()`` runs when the earliest is due."""

    __slots__ = ("_loop", "_nacked", "_on_due", "_timer", "_unacked")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_due: Callable[[], None]) -> None:
        self._loop = loop
        self._on_due = on_due
        self._unacked: dict[EntryKey, float] = {}  # received, not acked: when it times out
        self._nacked: dict[EntryKey, float] = {}  # when to ask for redelivery
        self._timer: asyncio.TimerHandle | None = None

    def track_unacked(self, key: EntryKey, due: float) -> None:
        """An entry was handed out: it times out at ``due`` unless acknowledged first."""
        self._unacked.setdefault(key, due)
        self.arm(due)

    def nack(self, key: EntryKey, entries: Iterable[EntryKey], due: float) -> None:
        """The message of ``key`` was negatively acknowledged: ``entries`` (its own, or every
        chunk's) are due at ``due``, and its unacked timeout no longer counts."""
        self._unacked.pop(key, None)
        for entry in entries:
            self._nacked[entry] = due
        self.arm(due)

    def forget(self, key: EntryKey) -> None:
        """The entry was acknowledged."""
        if self._unacked:
            self._unacked.pop(key, None)
        if self._nacked:
            self._nacked.pop(key, None)

    def forget_all(self, keys: list[EntryKey]) -> None:
        """``forget`` each of ``keys`` (a window of acknowledgements; nothing to do unless
        the ack timeout or negative acknowledgements track entries)."""
        if self._unacked or self._nacked:
            for key in keys:
                self.forget(key)

    def forget_unacked_up_to(self, key: EntryKey) -> None:
        """Entries up to ``key`` were acknowledged cumulatively."""
        for done in [k for k in self._unacked if k <= key]:
            del self._unacked[done]

    def clear(self) -> None:
        """Everything is redelivered at once (the broker rewinds the subscription)."""
        self._unacked.clear()
        self._nacked.clear()

    def pop_due(self, now: float) -> list[EntryKey]:
        """The entries due by ``now`` (nacked first), no longer tracked."""
        due = [
            key for table in (self._nacked, self._unacked) for key, t in table.items() if t <= now
        ]
        for key in due:
            self._nacked.pop(key, None)
            self._unacked.pop(key, None)
        return due

    def arm_for_next(self) -> None:
        """Arm the timer for the earliest entry still tracked, if any."""
        pending = [*self._nacked.values(), *self._unacked.values()]
        if pending:
            self.arm(min(pending))

    def arm(self, due: float) -> None:
        timer = self._timer
        if timer is not None and timer.when() <= due:
            return
        if timer is not None:
            timer.cancel()
        self._timer = self._loop.call_at(due, self._fire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._on_due()
