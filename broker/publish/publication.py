"""What the publish path answers for one SEND: a ``Publication`` while it is being written, a
``Settled`` outcome when the answer is known at once.

The connection hands the topic the SEND's facts (producer, sequence ids, entry) and gets back a
``PublishOutcome``: a value it reads (``done``, ``position``, ``error``) and never writes. What
the receipt echoes (the SEND's own sequence ids) the connection keeps on its side. So no field
is written by both sides (issue #22; before, one ``SendRequest`` carried 13 fields that the
connection and the topic both wrote).

* ``Publication`` is created, staged and settled by the topic's ``Publisher``
  (``broker/publish/publisher.py``): it is the group commit's queue entry, and it is the only
  per-entry object of the publish path (issue #17, part 4).
* ``Settled`` is an answer that needs no write: a duplicate (PIP-6: ``-1:-1``), an
  idempotency-key duplicate (its original's position), or a refusal the connection decided.

How a pending outcome travels back: ``on_settled`` (the connection's path) is called once per
group commit for each distinct callback of the group, after every publication of the group is
settled, so one call writes the receipts of a whole group; ``future`` (``Topic.publish``, for
callers that await one entry) is resolved with the position, ``None`` for a duplicate, or the
error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.storage import Position
from protocol._accel import speedups

if TYPE_CHECKING:
    from broker.publish.idempotency_window import Ticket
    from broker.publish.producers import Producer

__all__ = [
    "DUPLICATE",
    "Publication",
    "PublishOutcome",
    "PyPublication",
    "Settled",
    "notify_settled",
]


class PublishOutcome(Protocol):
    """The answer to one SEND, as the connection reads it."""

    @property
    def done(self) -> bool:
        """Final: ``position`` or ``error`` will not change any more."""
        ...

    @property
    def position(self) -> Position | None:
        """Where the entry is durable; None for a duplicate (receipt ``-1:-1``) or a failure."""
        ...

    @property
    def error(self) -> BaseException | None: ...


class Settled:
    """An outcome known when the SEND arrives: nothing is (or will be) written for it."""

    __slots__ = ("error", "position")
    done = True

    def __init__(self, position: Position | None = None, error: BaseException | None = None):
        self.position = position
        self.error = error


#: A PIP-6 duplicate: not stored, answered with message id ``-1:-1`` (as the Java broker).
DUPLICATE = Settled()


class PyPublication:
    """An accepted SEND from the moment it is staged until its entry is durable or failed.

    The reference: ``Publication`` is the compiled class (``protocol/_send_path.pxi``, same
    fields and methods) when the extension is in use; one is made per SEND (issue #26)."""

    __slots__ = (
        "chunk_id",
        "done",
        "entry",
        "entry_crc",
        "error",
        "future",
        "highest_sequence_id",
        "on_settled",
        "position",
        "producer",
        "staged_at",
        "ticket",
    )

    def __init__(
        self,
        producer: Producer,
        highest_sequence_id: int,
        entry: bytes,
        chunk_id: int,
        staged_at: float,
        on_settled: Callable[[], None] | None,
        future: asyncio.Future[Position | None] | None,
        entry_crc: int = -1,
    ) -> None:
        self.producer = producer
        # Dedup's highest id: the SEND's, or the exact last id of a gapped batch on dedup's
        # rare path (``exact_batch_highest_sequence_id``).
        self.highest_sequence_id = highest_sequence_id
        self.entry = entry
        # The entry's CRC-32C when the SEND's checksum was verified (-1: unknown): the ledger
        # takes the record's CRC from it (``Ledger.append_many``).
        self.entry_crc = entry_crc
        # For a chunk that is not the last of its message: its chunk id (dedup tracks it).
        self.chunk_id = chunk_id
        self.staged_at = staged_at  # time.monotonic(): the publish latency starts here
        self.on_settled = on_settled
        self.future = future
        # Assigned when the group is appended; final once done (None: failed).
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.done = False
        # The entry's new idempotency keys and hidden indexes (issue #16), None without keys;
        # a single key's is its slot in the window's table (`IdempotencyWindow.reserve_one`).
        self.ticket: Ticket | int | None = None

    def resolve(self, position: Position) -> None:
        """Settle as durable at ``position``."""
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


_compiled: Any = speedups()
if TYPE_CHECKING:
    Publication = PyPublication
elif _compiled is not None:
    Publication = _compiled.Publication
else:
    Publication = PyPublication


def notify_settled(publications: list[Publication]) -> None:
    """Call each distinct ``on_settled`` of ``publications`` once (all of them are settled).

    A group holds runs of one connection's publications, so comparing with the previous
    callback skips most set operations."""
    previous: object = None
    notified: set[Callable[[], None]] = set()
    for publication in publications:
        callback = publication.on_settled
        if callback is None or callback is previous:
            continue
        previous = callback
        if callback not in notified:
            notified.add(callback)
            callback()
