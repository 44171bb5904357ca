"""A subscription: a cursor, its consumers, and the dispatch of entries to them.

Rules this module keeps:

1. The cursor (``broker.storage.Cursor``) is the only durable state: mark-delete, individual acks,
   PIP-54 batch-index bitsets. Everything else here (read position, pending, replay, delayed) is
   rebuilt from the cursor after a restart, so acknowledged messages are never redelivered and
   unacknowledged ones always are.
2. Dispatch order: the *replay* set (entries to deliver again, in position order) first, then new
   entries from the read position. Exclusive/Failover "rewind" is expressed the same way: their
   pending entries go back to the replay set, which keeps delivery in position order.
3. Permits count messages. An entry partially acknowledged at batch-index level costs only its
   still-unacknowledged indexes and carries its ``ack_set`` so the client skips the others (B4).
4. Nothing here does socket I/O: messages go out through ``ConsumerSink``; timers through a
   ``Scheduler`` (the event loop).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from broker.consumer import Consumer
from broker.errors import ConsumerBusy, NotAllowed
from broker.key_shared import AutoSplitRanges, sticky_key_hash
from broker.storage import Cursor, Position
from protocol.metadata import EntryMetadata

log = logging.getLogger(__name__)


class SubType(IntEnum):
    """``CommandSubscribe.SubType`` values."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class EntrySource(Protocol):
    """What a subscription reads from its topic (implemented by ``broker.topic.Topic``)."""

    def read_entries(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]]: ...

    def read_entry(self, position: Position) -> bytes | None: ...

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata: ...

    def next_position(self, position: Position) -> Position: ...

    def last_confirmed_position(self) -> Position: ...


@dataclass(slots=True)
class DispatchLimits:
    max_read_entries: int = 100
    max_read_bytes: int = 5 * 1024 * 1024
    batch_index_ack: bool = True
    delayed_delivery: bool = True
    delayed_tick_seconds: float = 1.0


@dataclass(slots=True)
class SubscriptionStats:
    msg_out: int = 0
    msg_redelivered: int = 0
    delayed: int = 0
    stats_extra: dict[str, int] = field(default_factory=dict)


def popcount_words(words: Iterable[int]) -> int:
    return sum((w & 0xFFFFFFFFFFFFFFFF).bit_count() for w in words)


class Subscription:
    """One named subscription of a topic."""

    def __init__(
        self,
        name: str,
        cursor: Cursor,
        source: EntrySource,
        scheduler: Scheduler,
        limits: DispatchLimits,
        *,
        durable: bool = True,
        on_empty: Callable[[Subscription], None] | None = None,
    ) -> None:
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType | None = None
        self.consumers: list[Consumer] = []
        self.stats = SubscriptionStats()
        self._source = source
        self._scheduler = scheduler
        self._limits = limits
        self._on_empty = on_empty
        self._read_position = source.next_position(cursor.mark_delete_position)
        #: position -> consumer it was dispatched to and still unacknowledged
        self._pending: dict[Position, Consumer] = {}
        self._replay: list[Position] = []  # heap
        self._replay_set: set[Position] = set()
        self._redelivery_counts: dict[Position, int] = {}
        self._delayed: list[tuple[int, Position]] = []  # heap of (deliver_at_ms, position)
        self._delayed_set: set[Position] = set()
        self._delayed_timer: TimerHandle | None = None
        self._key_ranges: AutoSplitRanges[int] = AutoSplitRanges()
        self._dispatch_scheduled = False
        self._dispatching = False
        self._keep_when_empty = False
        self._closed = False

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        """Attach a consumer; raises ConsumerBusy per the Java rules."""
        if self.consumers and self.sub_type is not None and sub_type != self.sub_type:
            raise ConsumerBusy("Subscription is of different type")
        if sub_type == SubType.Exclusive and self.consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        previous_active = self.active_consumer()
        self.sub_type = sub_type
        consumer.connected_since = time.monotonic()
        self.consumers.append(consumer)
        self._keep_when_empty = False
        if sub_type == SubType.Key_Shared:
            self._key_ranges.add(id(consumer))
            self._refresh_hash_ranges()
        if sub_type == SubType.Failover:
            self._notify_failover(previous_active, announce_to=consumer)
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer, *, redeliver: bool = True) -> None:
        """Detach a consumer (close or disconnect); its unacknowledged entries are redelivered."""
        if consumer not in self.consumers:
            return
        previous_active = self.active_consumer()
        self.consumers.remove(consumer)
        if self.sub_type == SubType.Key_Shared:
            self._key_ranges.remove(id(consumer))
            self._refresh_hash_ranges()
        self._return_pending(consumer, None, count=redeliver)
        if self.sub_type == SubType.Failover:
            self._notify_failover(previous_active, announce_to=None)
        if not self.consumers and self._on_empty is not None and not self._keep_when_empty:
            self._on_empty(self)
        self.schedule_dispatch()

    def active_consumer(self) -> Consumer | None:
        """The consumer that receives everything in Exclusive/Failover mode."""
        if not self.consumers:
            return None
        if self.sub_type == SubType.Failover:
            return min(self.consumers, key=lambda c: (c.priority_level, c.connected_since))
        return self.consumers[0]

    def _notify_failover(self, previous: Consumer | None, announce_to: Consumer | None) -> None:
        active = self.active_consumer()
        if active is not previous:
            if previous is not None and previous in self.consumers:
                # A newly preferred consumer takes over: hand back what the old one holds.
                self._return_pending(previous, None, count=False)
            for c in self.consumers:
                c.sink.active_consumer_change(c.consumer_id, c is active)
        elif announce_to is not None:
            announce_to.sink.active_consumer_change(announce_to.consumer_id, announce_to is active)

    def _refresh_hash_ranges(self) -> None:
        for c in self.consumers:
            c.hash_ranges = self._key_ranges.ranges_of(id(c))

    def disconnect_all(self) -> list[Consumer]:
        """Broker-initiated close of every consumer (seek, unload, delete)."""
        closing = list(self.consumers)
        for consumer in closing:
            consumer.sink.close_consumer(consumer.consumer_id)
        self.consumers.clear()
        self._key_ranges = AutoSplitRanges()
        return closing

    # ------------------------------------------------------------------ flow / acks

    def add_permits(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule_dispatch()

    def acknowledge(
        self, consumer: Consumer | None, acks: list[tuple[Position, list[int] | None]]
    ) -> None:
        """Individual acks; an ``ack_set`` (PIP-54) acknowledges only the cleared indexes."""
        for position, ack_set in acks:
            if ack_set and self._limits.batch_index_ack:
                self.cursor.delete_batch_indexes(position, ack_set)
                if not self.cursor.is_deleted(position):
                    continue
            elif ack_set:
                # Batch-index ack disabled: only a fully acknowledged batch counts (B5 baseline).
                if any(ack_set):
                    continue
                self.cursor.delete([position])
            else:
                self.cursor.delete([position])
            self._forget(position)
        self.schedule_dispatch()

    def acknowledge_cumulative(
        self, consumer: Consumer | None, position: Position, ack_set: list[int] | None
    ) -> None:
        """Everything up to ``position`` is consumed (partially ``position`` itself, PIP-54)."""
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowed("Cumulative ack is not supported for Shared subscriptions")
        if ack_set and self._limits.batch_index_ack and any(ack_set):
            before = Position(position.ledger_id, position.entry_id - 1)
            if before > self.cursor.mark_delete_position:
                self.cursor.mark_delete(before)
            self.cursor.delete_batch_indexes(position, ack_set)
        elif ack_set and any(ack_set):
            before = Position(position.ledger_id, position.entry_id - 1)
            if before > self.cursor.mark_delete_position:
                self.cursor.mark_delete(before)
        elif position > self.cursor.mark_delete_position:
            self.cursor.mark_delete(position)
        mark = self.cursor.mark_delete_position
        for pos in [p for p in self._pending if p <= mark]:
            self._forget(pos)
        if self.cursor.is_deleted(position):
            self._forget(position)
        self.schedule_dispatch()

    def _forget(self, position: Position) -> None:
        owner = self._pending.pop(position, None)
        if owner is not None:
            owner.pending.discard(position)
            owner.unacked_messages = max(0, owner.unacked_messages - 1)
        self._redelivery_counts.pop(position, None)
        if position in self._replay_set:
            self._replay_set.discard(position)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES, with ids (negative acks) or all of them."""
        self._return_pending(consumer, positions, count=True)
        self.schedule_dispatch()

    def _return_pending(
        self, consumer: Consumer, positions: list[Position] | None, *, count: bool
    ) -> None:
        chosen = list(consumer.pending) if positions is None else positions
        for position in chosen:
            if self._pending.get(position) is not consumer:
                continue
            del self._pending[position]
            consumer.pending.discard(position)
            consumer.unacked_messages = max(0, consumer.unacked_messages - 1)
            if count:
                self._redelivery_counts[position] = self._redelivery_counts.get(position, 0) + 1
            self._add_replay(position)

    def _add_replay(self, position: Position) -> None:
        if position not in self._replay_set:
            self._replay_set.add(position)
            heapq.heappush(self._replay, position)

    # ------------------------------------------------------------------ seek

    def reset_to(self, position: Position) -> None:
        """Move the subscription so that ``position`` is the next entry read (inclusive).

        The caller has already disconnected the consumers (Java's order: close, reset, reply).
        """
        self.cursor.reset(position)
        self._read_position = position
        self._pending.clear()
        self._replay.clear()
        self._replay_set.clear()
        self._redelivery_counts.clear()
        self._delayed.clear()
        self._delayed_set.clear()
        # A reader's subscription survives the seek disconnect (the client re-subscribes).
        self._keep_when_empty = True

    def keep_when_empty(self) -> None:
        self._keep_when_empty = True

    # ------------------------------------------------------------------ dispatch

    def schedule_dispatch(self) -> None:
        if self._dispatch_scheduled or self._closed:
            return
        self._dispatch_scheduled = True
        self._scheduler.call_later(0, self._run_dispatch)

    def _run_dispatch(self) -> None:
        self._dispatch_scheduled = False
        if self._closed or self._dispatching:
            return
        self._dispatching = True
        try:
            self.dispatch()
        finally:
            self._dispatching = False

    def dispatch(self) -> None:
        """Send as much as permits and socket buffers allow."""
        if not self.consumers:
            return
        self._dispatch_replay()
        self._dispatch_new()

    def _dispatch_replay(self) -> None:
        deferred: list[Position] = []
        while self._replay and self._any_consumer_ready():
            position = heapq.heappop(self._replay)
            if position not in self._replay_set:
                continue
            if self.cursor.is_deleted(position):
                self._replay_set.discard(position)
                continue
            entry = self._source.read_entry(position)
            if entry is None:
                self._replay_set.discard(position)
                continue
            if not self._deliver(position, entry, from_replay=True):
                deferred.append(position)
                if self.sub_type != SubType.Key_Shared:
                    break
            else:
                self._replay_set.discard(position)
        for position in deferred:
            heapq.heappush(self._replay, position)

    def _dispatch_new(self) -> None:
        while self._any_consumer_ready():
            batch = self._source.read_entries(
                self._read_position, self._limits.max_read_entries, self._limits.max_read_bytes
            )
            if not batch:
                return
            for position, entry in batch:
                if not self._any_consumer_ready():
                    return
                self._read_position = self._source.next_position(position)
                if self.cursor.is_deleted(position) or position in self._pending:
                    continue
                if position in self._replay_set or position in self._delayed_set:
                    continue
                if not self._deliver(position, entry, from_replay=False):
                    self._add_replay(position)

    def _any_consumer_ready(self) -> bool:
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active_consumer()
            return active is not None and active.can_receive()
        return any(c.can_receive() for c in self.consumers)

    def _deliver(self, position: Position, entry: bytes, *, from_replay: bool) -> bool:
        """Try to send one entry; False means "keep it for later" (no consumer can take it)."""
        metadata = self._source.entry_metadata(position, entry)
        if self._should_delay(position, metadata):
            return True
        consumer = self._choose_consumer(metadata)
        if consumer is None:
            return False
        ack_set = self.cursor.batch_ack_set(position) if self._limits.batch_index_ack else None
        messages = popcount_words(ack_set) if ack_set else metadata.num_messages
        redelivery_count = self._redelivery_counts.get(position, 0)
        consumer.sink.send_message(
            consumer.consumer_id, position, entry, redelivery_count, ack_set or None
        )
        consumer.permits -= messages
        consumer.unacked_messages += 1
        consumer.messages_out += messages
        consumer.pending.add(position)
        self._pending[position] = consumer
        self.stats.msg_out += messages
        if from_replay:
            self.stats.msg_redelivered += messages
        return True

    def _choose_consumer(self, metadata: EntryMetadata) -> Consumer | None:
        if self.sub_type in (SubType.Exclusive, SubType.Failover) or self.sub_type is None:
            active = self.active_consumer()
            return active if active is not None and active.can_receive() else None
        if self.sub_type == SubType.Key_Shared:
            key = metadata.ordering_key or (
                metadata.partition_key.encode() if metadata.partition_key else None
            )
            owner_id = self._key_ranges.owner_of(sticky_key_hash(key))
            for c in self.consumers:
                if id(c) == owner_id:
                    return c if c.can_receive() else None
            return None
        return self._next_shared_consumer()

    def _next_shared_consumer(self) -> Consumer | None:
        # Round-robin: rotate the list so the chosen consumer goes to the back.
        for index, consumer in enumerate(self.consumers):
            if consumer.can_receive():
                self.consumers.append(self.consumers.pop(index))
                return consumer
        return None

    # ------------------------------------------------------------------ delayed delivery

    def _should_delay(self, position: Position, metadata: EntryMetadata) -> bool:
        deliver_at = metadata.deliver_at_time
        if (
            not deliver_at
            or not self._limits.delayed_delivery
            or self.sub_type not in (SubType.Shared, SubType.Key_Shared)
        ):
            return False
        now_ms = int(time.time() * 1000)
        if deliver_at <= now_ms:
            return False
        if position not in self._delayed_set:
            self._delayed_set.add(position)
            heapq.heappush(self._delayed, (deliver_at, position))
            self.stats.delayed = len(self._delayed_set)
            self._arm_delayed_timer()
        return True

    def _arm_delayed_timer(self) -> None:
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        if not self._delayed:
            self._delayed_timer = None
            return
        wait = max(0.0, self._delayed[0][0] / 1000 - time.time())
        # Wake no later than the earliest due entry, in ticks no finer than the configured one.
        wait = max(wait, 0.001)
        self._delayed_timer = self._scheduler.call_later(wait, self._release_delayed)

    def _release_delayed(self) -> None:
        self._delayed_timer = None
        now_ms = int(time.time() * 1000)
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, position = heapq.heappop(self._delayed)
            self._delayed_set.discard(position)
            if not self.cursor.is_deleted(position):
                self._add_replay(position)
        self.stats.delayed = len(self._delayed_set)
        self._arm_delayed_timer()
        self.schedule_dispatch()

    # ------------------------------------------------------------------ queries

    def backlog(self) -> int:
        return self.cursor.backlog()

    def unacked_count(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._closed = True
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
            self._delayed_timer = None

    def describe(self) -> dict[str, object]:
        return {
            "type": self.sub_type.name if self.sub_type is not None else None,
            "durable": self.durable,
            "msgBacklog": self.backlog(),
            "unackedMessages": len(self._pending),
            "msgOutCounter": self.stats.msg_out,
            "msgRedeliverCounter": self.stats.msg_redelivered,
            "msgDelayed": len(self._delayed_set),
            "markDeletePosition": f"{self.cursor.mark_delete_position[0]}:"
            f"{self.cursor.mark_delete_position[1]}",
            "readPosition": f"{self._read_position[0]}:{self._read_position[1]}",
            "consumers": [
                {
                    "consumerName": c.name,
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked_messages,
                    "msgOutCounter": c.messages_out,
                }
                for c in self.consumers
            ],
        }
