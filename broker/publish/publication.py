"""``SendRequest``: one SEND from the moment it is read until its receipt is written.

It is the only per-entry object of the publish path (issue #17, part 4): the connection builds
it from the SEND, the topic decides on it (dedup, idempotency keys), stages it as the group
commit's queue entry, and settles it when the group is durable or failed; the connection then
writes its receipt from it. Before, a SEND made a connection record, a future, a done callback
and a topic record.

How the outcome travels back:

* ``on_settled`` (the connection's path): called once per group commit for each distinct
  callback of the group, after every request of the group is settled, so one call writes the
  receipts of a whole group (in SEND order: the connection keeps its requests in a deque).
* ``future`` (``Topic.publish``, for callers that await one entry): resolved with the position,
  ``None`` for a duplicate, or the error.

Identity (which producer, first and highest sequence id) is decided once, by the connection,
with ``protocol.send_identity``, and only refined by the topic on dedup's rare path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.storage import Position

if TYPE_CHECKING:
    from broker.publish.idempotency_window import Ticket
    from broker.publish.producers import Producer

__all__ = ["SendRequest"]


class SendRequest:
    """An accepted (or refused) SEND; ``done`` once ``position`` / ``error`` is final."""

    __slots__ = (
        "chunk_id",
        "done",
        "entry",
        "error",
        "future",
        "highest_sequence_id",
        "on_settled",
        "position",
        "producer",
        "receipt_highest",
        "sequence_id",
        "staged_at",
        "ticket",
    )

    def __init__(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        entry: bytes,
        on_settled: Callable[[], None] | None = None,
        future: asyncio.Future[Position | None] | None = None,
    ) -> None:
        self.producer = producer
        self.sequence_id = sequence_id
        # Dedup's highest id (the topic may refine it on dedup's rare path, see
        # ``exact_batch_highest``); the receipt echoes the SEND's as it was decided on arrival.
        self.highest_sequence_id = highest_sequence_id
        self.receipt_highest = highest_sequence_id
        self.entry = entry
        self.on_settled = on_settled
        self.future = future
        # For a chunk that is not the last of its message: its chunk id (dedup tracks it).
        self.chunk_id = -1
        # Assigned when the group is appended; final once done (None: a duplicate or failed).
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.done = False
        self.staged_at = 0.0  # time.monotonic() when staged: the publish latency starts here
        # The entry's new idempotency keys and hidden indexes (issue #16), None without keys.
        self.ticket: Ticket | None = None

    def resolve(self, position: Position | None) -> None:
        """Settle with ``position`` (None: a duplicate, receipt ``-1:-1``)."""
        self.position = position
        self.done = True
        future = self.future
        if future is not None and not future.done():
            future.set_result(position)

    def fail(self, error: BaseException) -> None:
        """Settle with ``error`` (its position, if one was assigned, never became durable)."""
        self.error = error
        self.position = None
        self.done = True
        future = self.future
        if future is not None and not future.done():
            future.set_exception(error)
