"""Waiting for the writes a topic has accepted so far: the PIP-68 grant barrier.

A topic accepts a SEND (``Topic.publish``) before it appends it to the ledger: accepted entries
wait in the staging list for the next group commit. A new exclusive holder may only be told it
holds the topic once every entry its predecessors managed to get accepted is settled (durable, or
failed back to its client), so that none of theirs becomes durable after its PRODUCER_SUCCESS.
Looking at the ledger alone cannot tell: staged entries are not in it yet.

``WriteBarrier`` counts accepted and settled writes. Writes settle in acceptance order (one flush
loop completes or fails them group by group), so "everything accepted up to now has settled" is
``settled >= accepted-at-the-time-of-asking``, and a waiter is woken by the group commit that
reaches its count, not by polling.
"""

from __future__ import annotations

import asyncio


class WriteBarrier:
    """Accepted/settled write counters with waiters; lives on one event loop."""

    def __init__(self) -> None:
        self._accepted = 0
        self._settled = 0
        # A list, not a deque: every topic has a barrier and waiters are rare (PIP-68 grants,
        # terminate); an empty deque costs ~700 bytes, an empty list ~60.
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def in_flight(self) -> int:
        """Writes accepted but not settled yet."""
        return self._accepted - self._settled

    def accepted(self, count: int = 1) -> None:
        """``count`` writes were accepted (staged for the ledger)."""
        self._accepted += count

    def settled(self, count: int) -> None:
        """The oldest ``count`` unsettled writes are durable or failed."""
        self._settled = min(self._accepted, self._settled + count)
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._settled:
            _target, waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)

    def release_all(self) -> None:
        """The writer is gone (the topic was abandoned): nothing will settle any more."""
        self._settled = self._accepted
        self.settled(0)

    async def wait_for_accepted(self) -> None:
        """Return once every write accepted before this call has settled."""
        target = self._accepted
        if self._settled >= target:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))  # targets only grow: the list stays sorted
        await waiter
