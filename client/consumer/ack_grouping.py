"""A consumer's acknowledgements, grouped as the C++ client groups them.

``ackGroupingTimeMs`` 100 and ``ackGroupingMaxSize`` 1000: individual acknowledgements wait
up to 100 ms, or until 1000 are pending, and leave together in one ACK command. Any other
frame about acknowledgement (a cumulative ack, a redelivery request, an ack of a corrupt entry)
goes through ``write``, which sends the group first, so the broker sees them in the order they
were made. Without a ready connection the group is kept and sent once subscribed again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from client.acks import EntryKey
from protocol import commands
from protocol.commands import AckIdentity
from protocol.ids import MessageId as WireMessageId

if TYPE_CHECKING:
    from client.connection import Connection

__all__ = ["AckGrouper"]

_ACK_GROUPING_TIME = 0.1
_ACK_GROUPING_MAX_SIZE = 1000


class AckGrouper:
    """Pending acknowledgements of one consumer; ``connection()`` is where they go now.

    Whole entries (nearly every acknowledgement) are kept as ``(ledger id, entry id)`` and
    written by ``commands.ack_entries`` in one step; anything else (part of a batch with its
    ack set) as the ``AckIdentity`` ``commands.ack`` takes. One ACK command carries both.
    """

    __slots__ = ("_connection", "_consumer_id", "_entries", "_loop", "_others", "_timer")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        consumer_id: int,
        connection: Callable[[], Connection | None],
    ) -> None:
        self._loop = loop
        self._consumer_id = consumer_id
        self._connection = connection
        self._entries: list[EntryKey] = []
        self._others: list[AckIdentity] = []
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._entries) + len(self._others)

    def add_entry(self, key: EntryKey) -> None:
        """Acknowledge the whole entry ``key``."""
        entries = self._entries
        entries.append(key)
        if len(entries) + len(self._others) >= _ACK_GROUPING_MAX_SIZE:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(_ACK_GROUPING_TIME, self.flush)

    def add_entries(self, keys: list[EntryKey]) -> None:
        """``add_entry`` for each of ``keys``, in order (a window of acknowledgements)."""
        entries = self._entries
        room = _ACK_GROUPING_MAX_SIZE - len(entries) - len(self._others)
        if len(keys) < room:
            entries.extend(keys)
            if self._timer is None:
                self._timer = self._loop.call_later(_ACK_GROUPING_TIME, self.flush)
            return
        for key in keys:  # a group fills up on the way: flushed at its limit, as one by one
            self.add_entry(key)

    def add(self, item: AckIdentity) -> None:
        others = self._others
        others.append(item)
        if len(self._entries) + len(others) >= _ACK_GROUPING_MAX_SIZE:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(_ACK_GROUPING_TIME, self.flush)

    def flush(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if not self._entries and not self._others:
            return
        cnx = self._connection()
        if cnx is None or not cnx.is_ready:
            return  # kept: sent once subscribed again
        if self._others:
            cnx.write(commands.ack(self._consumer_id, self.take()))
            return
        entries, self._entries = self._entries, []
        cnx.write(commands.ack_entries(self._consumer_id, entries))

    def write(self, frame: bytes) -> None:
        """Write ``frame`` after the pending group (keeps the order of individual and
        cumulative acks)."""
        self.flush()
        cnx = self._connection()
        if cnx is not None:
            cnx.write(frame)

    def take(self) -> list[AckIdentity]:
        """The pending group, no longer pending (a closing consumer sends it itself)."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        entries, self._entries = self._entries, []
        others, self._others = self._others, []
        return [WireMessageId(ledger, entry) for ledger, entry in entries] + others
