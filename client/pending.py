"""The producer's in-flight sends, oldest first: the heart of "never lose, never duplicate".

Every SEND a producer writes stays here, with the exact frame bytes, until the broker answers
it. After a reconnection the producer writes every frame still here again, in order and
unchanged (same sequence ids, same publish times), so with PIP-6 dedup each message is stored
once whatever happened to the earlier copies.

Matching follows the C++ producer (``ProducerImpl::ackReceived``), because the broker answers
each producer's SENDs in order: a receipt is compared with the *oldest* operation only.

* equal sequence id: that operation is done (its futures get their message ids);
* lower: the receipt is for an operation already given up (send timeout): ignored;
* higher: an operation was skipped, so the connection cannot be trusted: ``OutOfOrderReceipt``
  (the producer closes the connection, reconnects and resends).

The queue also keeps the application's bound on pending messages (``max_pending_messages``),
with waiters for ``block_if_queue_full``. No I/O, no clocks: deadlines are numbers the producer
sets and compares.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from client.errors import PulsarException
from client.message_id import MessageId
from protocol.ids import MessageId as WireMessageId

__all__ = ["ChunkedSend", "Completion", "OutOfOrderReceipt", "PendingSends", "SendOp"]


class Completion(Protocol):
    """Where a send's outcome goes: an ``asyncio.Future`` (``AsyncProducer.send``), or any
    object with the same three methods (the blocking facade's callbacks, which then run
    without a round through the event loop's scheduler)."""

    def done(self) -> bool: ...

    def set_result(self, result: MessageId, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass(slots=True, eq=False)
class SendOp:
    """One SEND: an entry of one message, a batch, or one chunk of a large message.

    Attributes:
        sequence_id: the SEND's sequence id (the first message's, for a batch).
        frame: the complete SEND frame, written again unchanged after a reconnection.
        futures: one completion per message the entry completes, in batch order (empty for
            a chunk that is not the last of its message).
        last_sequence_id: the highest sequence id the entry carries (``last_sequence_id()``
            of the producer becomes this once the entry is acknowledged).
        permits: queue slots (messages) given back when the operation ends.
        is_batch: the entry is a batch: message i gets batch index i in its id.
        chunks: shared by the chunks of one chunked message (its last chunk's id names the
            message, together with the first chunk's position).
        deadline: when the send times out (the producer's clock), 0 for never.
        trackers: ``flush()`` waiters, completed with this operation.
    """

    sequence_id: int
    frame: bytes
    futures: list[Completion]
    last_sequence_id: int
    permits: int = 1
    is_batch: bool = False
    chunks: ChunkedSend | None = None
    deadline: float = 0.0
    trackers: list[asyncio.Future[None]] | None = None

    def succeed(self, ledger_id: int, entry_id: int, partition: int) -> None:
        """Hand every waiting sender its message id (``-1:-1`` for a PIP-6 duplicate)."""
        futures = self.futures
        if self.chunks is not None:
            self.chunks.received(WireMessageId(ledger_id, entry_id, partition), futures)
        elif not self.is_batch:
            for future in futures:
                if not future.done():
                    future.set_result(MessageId(partition, ledger_id, entry_id))
        else:
            size = len(futures)
            for index, future in enumerate(futures):
                if not future.done():
                    future.set_result(
                        MessageId(partition, ledger_id, entry_id, index, batch_size=size)
                    )
        if self.trackers:
            for tracker in self.trackers:
                if not tracker.done():
                    tracker.set_result(None)

    def fail(self, error: PulsarException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)
        for tracker in self.trackers or ():
            if not tracker.done():
                tracker.set_exception(error)


@dataclass(slots=True, eq=False)
class ChunkedSend:
    """The chunks of one message in flight: remembers where the first one was stored."""

    first: WireMessageId | None = None

    def received(self, wire: WireMessageId, futures: list[Completion]) -> None:
        if self.first is None:
            self.first = wire
        for future in futures:  # only the last chunk carries the sender's future
            if not future.done():
                future.set_result(MessageId.from_wire(wire, first_chunk=self.first))


class OutOfOrderReceipt(Exception):
    """A receipt (or send error) for a sequence id beyond the oldest pending one."""


@dataclass(slots=True)
class _Capacity:
    limit: int  # <= 0: unlimited
    used: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


class PendingSends:
    """SEND operations awaiting their receipts, oldest first, and the pending-message bound."""

    __slots__ = ("_capacity", "_ops")

    def __init__(self, max_pending_messages: int) -> None:
        self._ops: deque[SendOp] = deque()
        self._capacity = _Capacity(max_pending_messages)

    # --- the queue ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[SendOp]:
        return iter(self._ops)

    @property
    def oldest(self) -> SendOp | None:
        return self._ops[0] if self._ops else None

    def append(self, op: SendOp) -> None:
        self._ops.append(op)

    def on_receipt(
        self, sequence_id: int, ledger_id: int, entry_id: int, partition: int
    ) -> SendOp | None:
        """Complete the oldest operation if the receipt is its; None if the receipt is stale.

        Raises:
            OutOfOrderReceipt: the receipt is for a later operation.
        """
        op = self._claim(sequence_id)
        if op is not None:
            op.succeed(ledger_id, entry_id, partition)
        return op

    def on_send_error(self, sequence_id: int, error: PulsarException) -> SendOp | None:
        """Fail the oldest operation if the error is about it (ChecksumError); None if stale.

        Raises:
            OutOfOrderReceipt: the error is about a later operation.
        """
        op = self._claim(sequence_id)
        if op is not None:
            op.fail(error)
        return op

    def fail_all(self, error: PulsarException) -> int:
        """Fail every pending operation (send timeout, fencing, close); returns how many."""
        ops, self._ops = self._ops, deque()
        for op in ops:
            self.release(op.permits)
            op.fail(error)
        return len(ops)

    def track_oldest_to_newest(self) -> asyncio.Future[None] | None:
        """A future that completes when the newest operation now pending does (flush).

        Receipts come in order, so every older operation is done by then. It fails with the
        newest operation's error if that one fails. None when nothing is pending.
        """
        if not self._ops:
            return None
        tracker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        newest = self._ops[-1]
        if newest.trackers is None:
            newest.trackers = []
        newest.trackers.append(tracker)
        return tracker

    def _claim(self, sequence_id: int) -> SendOp | None:
        ops = self._ops
        if not ops:
            return None
        op = ops[0]
        if sequence_id == op.sequence_id:
            ops.popleft()
            self.release(op.permits)
            return op
        if sequence_id < op.sequence_id:
            return None
        raise OutOfOrderReceipt(f"answer for sequence id {sequence_id}, expected {op.sequence_id}")

    # --- the bound on pending messages --------------------------------------------------

    @property
    def messages(self) -> int:
        """Messages accepted and not yet answered (including those a batch still holds)."""
        return self._capacity.used

    def has_room(self) -> bool:
        capacity = self._capacity
        return capacity.limit <= 0 or capacity.used < capacity.limit

    def reserve(self, messages: int = 1) -> None:
        self._capacity.used += messages

    def release(self, messages: int) -> None:
        self._capacity.used -= messages
        if self._capacity.waiters:
            self._wake_waiters()

    async def wait_for_room(self) -> None:
        """Wait until a slot is free (``block_if_queue_full``); cancellation is safe."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._capacity.waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._wake_waiters()  # woken but cancelled before using the slot: pass it on
            else:
                try:
                    self._capacity.waiters.remove(waiter)
                except ValueError:
                    pass
            raise

    def _wake_waiters(self) -> None:
        capacity = self._capacity
        free = capacity.limit - capacity.used if capacity.limit > 0 else len(capacity.waiters)
        while capacity.waiters and free > 0:
            waiter = capacity.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def wake_all_waiters(self, error: PulsarException) -> None:
        """Fail every sender blocked on a full queue (the producer is closing or fenced)."""
        waiters, self._capacity.waiters = self._capacity.waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
