"""A subscription: a cursor, its consumers, and the dispatch of entries to them.

Rules this module keeps:

1. The cursor (``broker.storage.Cursor``) is the only durable state: mark-delete, individual acks,
   PIP-54 batch-index bitsets. Everything else here (read position, in-flight entries, replay,
   delayed) is rebuilt from the cursor after a restart or a topic reload, so acknowledged
   messages are never redelivered and unacknowledged ones always are (up to what the cursor had
   persisted when the process died: see ``Cursor.maybe_persist``).
2. Dispatch order: the *replay* set (entries to deliver again, in position order) first, then new
   entries from the read position. Exclusive/Failover "rewind" is expressed the same way: their
   in-flight entries go back to the replay set, which keeps delivery in position order.
3. PIP-54 (``DispatchLimits.batch_index_ack``, Pulsar's ``acknowledgmentAtBatchIndexLevelEnabled``):
   an ACK whose ``ack_set`` still has set bits acknowledges only the cleared indexes; the cursor
   ANDs it into what it holds (it never rolls back, Pulsar #18042) and turns an all-clear set into
   an entry ack that can move the mark-delete. A partially acknowledged entry is always sent with
   the cursor's ``ack_set`` (redelivery, another Shared consumer, reconnect, restart) so the client
   skips the acknowledged indexes. With the flag off, partial acks are ignored and whole batches
   are redelivered (Java's baseline, B5).
4. Accounting (B4): what an entry costs in permits is what the client gives back for it (see
   ``broker.dispatch.consumer``), and a consumer's ``unacked_messages`` is the sum of the
   still-unacknowledged indexes of its in-flight entries, so both balance to the Java figures
   when indexes are skipped and delivery never stalls.
5. Nothing here does socket I/O: messages go out through ``ConsumerSink``; timers through a
   ``Scheduler`` (the event loop).
6. Dispatch never waits for the disk: entries come from
``broker.dispatch.entry_loader.EntryLoader``,
   at once when the entry cache holds them (tailing consumers), else from a read in a disk
   thread, after which dispatch runs again. A pass that needs a replayed entry from disk stops
   there, so nothing newer overtakes it (rule 2).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from broker.dispatch.consumer import Consumer
from broker.dispatch.entry_loader import ON_DISK, EntryLoader, EntryReads, Scheduler, TimerHandle
from broker.dispatch.key_shared import AutoSplitRanges, sticky_key_hash
from broker.errors import ConsumerBusy, NotAllowed
from broker.publish.idempotency_window import visible_ack_set
from broker.storage import Cursor, InvalidPositionError, Position, StorageError
from protocol.metadata import EntryMetadata

log = logging.getLogger(__name__)

_WORD_MASK = (1 << 64) - 1


class SubType(IntEnum):
    """``CommandSubscribe.SubType`` values."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class EntrySource(EntryReads, Protocol):
    """What a subscription reads from its topic (implemented by ``broker.topics.topic.Topic``):
    entries from memory or, off the loop, from disk (``EntryReads``), and facts about them."""

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata | None:
        """The entry's metadata, or None for an entry whose metadata does not parse."""
        ...

    def next_position(self, position: Position) -> Position: ...

    def last_confirmed_position(self) -> Position: ...


@dataclass(slots=True)
class DispatchLimits:
    max_read_entries: int = 100
    max_read_bytes: int = 5 * 1024 * 1024
    #: Pulsar's ``acknowledgmentAtBatchIndexLevelEnabled`` (PIP-54)
    batch_index_ack: bool = True
    delayed_delivery: bool = True
    delayed_tick_seconds: float = 1.0


@dataclass(slots=True)
class SubscriptionStats:
    msg_out: int = 0
    bytes_out: int = 0  # entry bytes dispatched (Pulsar's msgThroughputOut counts these)
    msg_redelivered: int = 0
    delayed: int = 0
    unreadable_skipped: int = 0
    stats_extra: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _InFlight:
    """An entry dispatched to a consumer and not yet fully acknowledged."""

    consumer: Consumer
    #: messages in the entry (``num_messages``; 1 for a non-batch entry)
    batch_size: int
    #: of those, how many are still unacknowledged (this entry's share of the consumer's
    #: ``unacked_messages``)
    unacked: int


def unacked_indexes(ack_set: Sequence[int], batch_size: int) -> int:
    """How many of indexes ``0 .. batch_size-1`` a PIP-54 ack set marks unacknowledged.

    ``ack_set`` holds Java ``BitSet`` words (bit i in word i // 64, set = unacknowledged);
    words may be signed int64 as they come off the wire. Bits past the batch are ignored: a
    client cannot make an entry look bigger than it is.
    """
    count = 0
    for word_index, word in enumerate(ack_set):
        first = word_index * 64
        if first >= batch_size:
            break
        bits = word & _WORD_MASK
        if batch_size - first < 64:
            bits &= (1 << (batch_size - first)) - 1
        count += bits.bit_count()
    return count


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
        self._in_flight: dict[Position, _InFlight] = {}
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
        #: Whether entries come through the compacted view (readCompacted, issue #14).
        self.read_compacted = False
        # Consumers already told REACHED_END_OF_TOPIC (once each, as Java).
        self._told_end: set[Consumer] = set()
        self._entries = self._new_loader(source)

    def _new_loader(self, source: EntrySource) -> EntryLoader:
        return EntryLoader(
            self.name,
            source,
            self._scheduler,
            self.schedule_dispatch,
            self._read_budget,
            max_entries=self._limits.max_read_entries,
            max_bytes=self._limits.max_read_bytes,
        )

    def use_source(self, source: EntrySource, *, read_compacted: bool) -> None:
        """Read through ``source`` from now on (readCompacted on or off); only while no consumer
        is attached, so nothing is in flight. The read position restarts after the mark-delete."""
        if self.consumers:
            raise ConsumerBusy("Subscription has consumers with a different readCompacted")
        self._entries.close()
        self._source = source
        self.read_compacted = read_compacted
        self._entries = self._new_loader(source)
        self._read_position = source.next_position(self.cursor.mark_delete_position)
        self._replay.clear()
        self._replay_set.clear()

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
        self._told_end.discard(consumer)
        if self.sub_type == SubType.Key_Shared:
            self._key_ranges.remove(id(consumer))
            self._refresh_hash_ranges()
        self._return_in_flight(consumer, None, count=redeliver)
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
                self._return_in_flight(previous, None, count=False)
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
        """Individual acks; an ``ack_set`` with set bits (PIP-54) acknowledges only the cleared
        indexes. The same entry may appear several times in one ACK (the client sends the
        batch's current bitset each time); ANDing makes that harmless.
        """
        last = self._source.last_confirmed_position()
        for position, ack_set in acks:
            if position > last:
                # Names no durable entry: a confused client. Java ignores it too.
                continue
            if ack_set and any(ack_set):
                ack_set = self._clear_hidden(position, ack_set)
            if ack_set and any(ack_set):
                if not self._limits.batch_index_ack:
                    # Flag off: Java's cursor ignores a partial ack; the batch stays unacked
                    # until the client acks the entry whole (B5 baseline).
                    continue
                self.cursor.delete_batch_indexes(position, ack_set)
            else:
                # No ack_set, or an all-clear one: the whole entry is acknowledged.
                self.cursor.delete([position])
            self._settle(position)
        self.schedule_dispatch()

    def acknowledge_cumulative(
        self, consumer: Consumer | None, position: Position, ack_set: list[int] | None
    ) -> None:
        """Everything up to ``position`` is consumed; with an ``ack_set`` (PIP-54) the entries
        before ``position`` fully and ``position`` itself only in its cleared indexes.

        With the flag off a partial cumulative ack moves the mark-delete to the entry before
        (Java: ``getPreviousPosition``), so that batch is redelivered whole.
        """
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowed("Cumulative ack is not supported for Shared subscriptions")
        if position > self._source.last_confirmed_position():
            return
        if ack_set and any(ack_set):
            ack_set = self._clear_hidden(position, ack_set)
        if ack_set and any(ack_set):
            self._mark_delete_through(position.previous())
            if self._limits.batch_index_ack:
                self.cursor.delete_batch_indexes(position, ack_set)
        else:
            self._mark_delete_through(position)
        for done in [p for p in self._in_flight if self.cursor.is_deleted(p)]:
            self._forget(done)
        self._settle(position)
        self.schedule_dispatch()

    def _mark_delete_through(self, position: Position) -> None:
        if position > self.cursor.mark_delete_position:
            try:
                self.cursor.mark_delete(position)
            except InvalidPositionError:
                # Names no durable entry (e.g. 0:0 after a seek below the first ledger): Java
                # ignores an ack it cannot apply. Raised here, it would kill the connection.
                return

    def _settle(self, position: Position) -> None:
        """Bring the in-flight bookkeeping of ``position`` in line with the cursor after an ack."""
        if self.cursor.is_deleted(position):
            self._forget(position)
            return
        flight = self._in_flight.get(position)
        held = self.cursor.batch_ack_set(position)
        if flight is None or held is None:
            return
        remaining = unacked_indexes(held, flight.batch_size)
        if remaining == 0:
            # Only bits past the end of the batch are left set: every real index is acked.
            self.cursor.delete([position])
            self._forget(position)
        elif remaining < flight.unacked:
            flight.consumer.unacked_messages -= flight.unacked - remaining
            flight.unacked = remaining

    def _forget(self, position: Position) -> None:
        """``position`` is fully acknowledged: drop every trace of it here."""
        flight = self._in_flight.pop(position, None)
        if flight is not None:
            self._release(flight, position)
        self._redelivery_counts.pop(position, None)
        self._replay_set.discard(position)
        self._entries.release(position)

    @staticmethod
    def _release(flight: _InFlight, position: Position) -> None:
        consumer = flight.consumer
        consumer.pending.discard(position)
        consumer.unacked_messages = max(0, consumer.unacked_messages - flight.unacked)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES, with ids (negative acks) or all of them."""
        self._return_in_flight(consumer, positions, count=True)
        self.schedule_dispatch()

    def _return_in_flight(
        self, consumer: Consumer, positions: list[Position] | None, *, count: bool
    ) -> None:
        chosen = list(consumer.pending) if positions is None else positions
        for position in chosen:
            flight = self._in_flight.get(position)
            if flight is None or flight.consumer is not consumer:
                continue
            del self._in_flight[position]
            self._release(flight, position)
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
        if self.read_compacted:
            repin = getattr(self._source, "repin", None)
            if repin is not None:
                repin()  # a restart: the newest compacted view (broker.compaction.reads)
        self._read_position = position
        self._in_flight.clear()
        self._replay.clear()
        self._replay_set.clear()
        self._redelivery_counts.clear()
        self._delayed.clear()
        self._delayed_set.clear()
        self._entries.invalidate()  # a read still in flight is for the old position
        # A reader's subscription survives the seek disconnect (the client re-subscribes).
        self._keep_when_empty = True

    def skip_through(self, position: Position) -> None:
        """Count everything up to ``position`` as consumed, consumers staying connected (admin
        skip-all and message TTL expiry, as Java's ``markDelete`` on the cursor): entries in
        flight there are forgotten, their consumers' acks later are no-ops."""
        self._mark_delete_through(min(position, self._source.last_confirmed_position()))
        for done in [p for p in self._in_flight if self.cursor.is_deleted(p)]:
            self._forget(done)
        self._read_position = max(
            self._read_position, self._source.next_position(self.cursor.mark_delete_position)
        )
        self.schedule_dispatch()

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
        """Send as much as permits and socket buffers allow (rule 6: without waiting)."""
        if not self.consumers:
            return
        if self._dispatch_replay():
            self._dispatch_new()

    def _dispatch_replay(self) -> bool:
        """Redeliver what is due; False if a replayed entry is being read from disk."""
        deferred: list[Position] = []
        waiting = False
        while self._replay and self._any_consumer_ready():
            position = heapq.heappop(self._replay)
            if position not in self._replay_set:
                continue
            if self.cursor.is_deleted(position):
                self._replay_set.discard(position)
                continue
            entry = self._entries.entry(position)
            if entry is ON_DISK:
                deferred.append(position)
                waiting = True
                break
            if entry is None:
                self._replay_set.discard(position)
                continue
            if not self._deliver(position, entry, from_replay=True):
                self._entries.hold(position, entry)
                deferred.append(position)
                if self.sub_type != SubType.Key_Shared:
                    break
            else:
                self._entries.release(position)
                self._replay_set.discard(position)
        for position in deferred:
            heapq.heappush(self._replay, position)
        return not waiting

    def _dispatch_new(self) -> None:
        while self._any_consumer_ready():
            batch = self._entries.batch(self._read_position)
            if not batch:
                if batch is not None:
                    self._maybe_reached_end()
                return  # the end, or a disk read that dispatches again when it completes
            for position, entry in batch:
                if not self._any_consumer_ready():
                    return
                self._read_position = self._source.next_position(position)
                if self.cursor.is_deleted(position) or position in self._in_flight:
                    continue
                if position in self._replay_set or position in self._delayed_set:
                    continue
                if not self._deliver(position, entry, from_replay=False):
                    self._add_replay(position)

    def _maybe_reached_end(self) -> None:
        """Past the last entry of a terminated topic: tell each consumer once (Java sends
        REACHED_END_OF_TOPIC when a read finds no more entries on a terminated topic)."""
        if not getattr(self._source, "terminated", False):
            return
        if self._read_position <= self._source.last_confirmed_position():
            return
        for consumer in self.consumers:
            if consumer not in self._told_end:
                self._told_end.add(consumer)
                notify = getattr(consumer.sink, "reached_end_of_topic", None)
                if notify is not None:
                    notify(consumer.consumer_id)

    def _read_budget(self) -> int:
        """How many entries are worth reading from disk now: no more than the consumers that
        would get them have permits for (Java: ``min(permits, dispatcherMaxReadBatchSize)``)."""
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active_consumer()
            return active.permits if active is not None else 0
        return sum(c.permits for c in self.consumers if c.permits > 0)

    def _any_consumer_ready(self) -> bool:
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active_consumer()
            return active is not None and active.can_receive()
        return any(c.can_receive() for c in self.consumers)

    def _deliver(self, position: Position, entry: bytes, *, from_replay: bool) -> bool:
        """Try to send one entry; False means "keep it for later" (no consumer can take it)."""
        metadata = self._source.entry_metadata(position, entry)
        if metadata is None:
            # Unreadable (an older build's write, or damage the CRC cannot see): it can never
            # be delivered, so it is acknowledged here rather than left to hold back the
            # mark-delete and every message after it. The topic logged and counted it.
            self.cursor.delete([position])
            self._forget(position)
            self.stats.unreadable_skipped += 1
            return True
        if self._should_delay(position, metadata):
            return True
        batch_size = max(1, metadata.num_messages)
        ack_set = self.cursor.batch_ack_set(position) if self._limits.batch_index_ack else None
        hidden = self._hidden_indexes(position)
        if hidden:
            # Issue #16: duplicate keys of a partly duplicate batch, hidden from everybody
            # through the PIP-54 ack set (sent even with batch-index acks off).
            ack_set = visible_ack_set(ack_set, hidden, batch_size)
        unacked = batch_size if ack_set is None else unacked_indexes(ack_set, batch_size)
        if unacked == 0:
            # Every index is acknowledged (stray bits past the batch kept the entry alive).
            self.cursor.delete([position])
            self._forget(position)
            return True
        consumer = self._choose_consumer(metadata)
        if consumer is None:
            return False
        redelivery_count = self._redelivery_counts.get(position, 0)
        consumer.sink.send_message(consumer.consumer_id, position, entry, redelivery_count, ack_set)
        consumer.permits -= batch_size if consumer.returns_permits_for_skipped else unacked
        consumer.unacked_messages += unacked
        consumer.messages_out += unacked
        consumer.pending.add(position)
        self._in_flight[position] = _InFlight(consumer, batch_size, unacked)
        self.stats.msg_out += unacked
        self.stats.bytes_out += len(entry)
        if from_replay:
            self.stats.msg_redelivered += unacked
        return True

    def _hidden_indexes(self, position: Position) -> int:
        """Bitmask of the batch indexes of ``position`` the topic hides from every subscription
        and reader (issue #16, ``broker.publish.idempotency_window``); 0 for a source without
        any."""
        hidden_of = getattr(self._source, "hidden_indexes", None)
        return 0 if hidden_of is None else int(hidden_of(position))

    def _clear_hidden(self, position: Position, ack_set: list[int]) -> list[int]:
        """An ack set from a client with the hidden indexes counted as acknowledged: the client
        never saw them, so its acks alone must be able to complete the entry."""
        hidden = self._hidden_indexes(position)
        if not hidden:
            return ack_set
        return visible_ack_set(ack_set, hidden, len(ack_set) * 64)

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
        """Messages dispatched and not yet acknowledged, over all consumers."""
        return sum(flight.unacked for flight in self._in_flight.values())

    @property
    def closed(self) -> bool:
        """Closed (topic unloaded or deleted, subscription deleted): its cursor is unusable."""
        return self._closed

    def close(self) -> None:
        """Stop dispatching and disconnect the consumers (topic unload, shutdown, deletion).

        The cursor is persisted *before* the consumers are told to go: a client reconnects
        within ~100 ms, possibly to a reloaded topic, which must already see every ack
        (Pulsar #14982: duplicates after an unload with batch-index acks on).
        """
        if self._closed:
            return
        self._closed = True
        self._entries.close()
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
            self._delayed_timer = None
        if self.cursor.durable and self.cursor.dirty:
            try:
                self.cursor.persist()
            except (OSError, StorageError):
                # The ledger's close persists again; the consumers must go either way.
                log.exception("subscription %r: persisting the cursor on close failed", self.name)
        self.disconnect_all()

    def describe(self) -> dict[str, object]:
        return {
            "type": self.sub_type.name if self.sub_type is not None else None,
            "durable": self.durable,
            "msgBacklog": self.backlog(),
            "unackedMessages": self.unacked_count(),
            "msgOutCounter": self.stats.msg_out,
            "msgRedeliverCounter": self.stats.msg_redelivered,
            "msgDelayed": len(self._delayed_set),
            "unreadableEntriesSkipped": self.stats.unreadable_skipped,
            "markDeletePosition": str(self.cursor.mark_delete_position),
            "readPosition": str(self._read_position),
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
