"""The dispatch loop: a subscription's entries out to its consumers.

Rules this module keeps:

1. Dispatch order: the *replay* set (entries to deliver again, in position order) first, then new
   entries from the read position. Exclusive/Failover "rewind" is expressed the same way: their
   in-flight entries go back to the replay set, which keeps delivery in position order.
2. Dispatch never waits for the disk: entries come from
   ``broker.dispatch.entry_loader.EntryLoader``, at once when the entry cache holds them
   (tailing consumers), else from a read in a disk thread, after which dispatch runs again. A
   pass that needs a replayed entry from disk stops there, so nothing newer overtakes it
   (rule 1).
3. Accounting (B4): what an entry costs in permits is what the client gives back for it (see
   ``broker.dispatch.consumer``), and a consumer's ``unacked_messages`` is the sum of the
   still-unacknowledged indexes of its in-flight entries, so both balance to the Java figures
   when indexes are skipped and delivery never stalls.
4. A partially acknowledged entry goes out with the cursor's PIP-54 ``ack_set``
   (``broker.dispatch.acknowledgements``), so the client skips the acknowledged indexes.
5. A pass collects each consumer's deliveries as a *run* and hands it to the consumer's sink
   once, at the end of the pass (``ConsumerSink.send_messages``: one buffer of MESSAGE frames,
   built in compiled code, one write), or earlier once ``WRITE_THROUGH_BYTES`` are waiting, so
   the connection's own measure of what a turn queued (its back-pressure) stays meaningful.

The per-entry path is hot: it reads the in-flight containers and the consumer selection through
attributes bound once in ``__init__``, never through another object per entry.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from broker.dispatch.acknowledgements import hidden_indexes, unacked_indexes
from broker.dispatch.consumer import Consumer, RunItem
from broker.dispatch.consumer_selection import ConsumerSelection
from broker.dispatch.delayed_delivery import DelayedDeliveries
from broker.dispatch.entry_loader import ON_DISK, EntryLoader, Scheduler
from broker.dispatch.entry_source import EntrySource
from broker.dispatch.in_flight import InFlight, InFlightEntries
from broker.publish.idempotency_window import visible_ack_set
from broker.storage import Cursor, Position
from protocol.enums import SubType
from protocol.metadata import EntryMetadata

#: Entry bytes a pass collects before it hands its runs to the sinks early (a pass is bounded by
#: ``dispatcherMaxReadSizeBytes`` anyway; this keeps a single write near the socket's low mark).
WRITE_THROUGH_BYTES = 1 << 20


@dataclass(slots=True)
class DispatchLimits:
    max_read_entries: int = 100
    max_read_bytes: int = 5 * 1024 * 1024
    #: Pulsar's ``acknowledgmentAtBatchIndexLevelEnabled`` (PIP-54)
    batch_index_ack: bool = True
    #: Pulsar's ``preciseDispatcherFlowControl``: an Exclusive/Failover consumer gets entries
    #: only while it has permits. Java's default is off (a read batch of ``min(permits, 100)``
    #: entries goes out whole, permits below zero); on here, because that overshoot costs our
    #: client ~35 % more CPU per batched message (a 100-entry backlog of batches in its queue),
    #: for a tailing gain within the noise (see ``ConsumerSelection.begin_pass``).
    precise_flow_control: bool = True
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


class Dispatcher:
    """Sends one subscription's entries: replayed ones first, then new ones from the read
    position, as far as permits and socket buffers allow."""

    def __init__(
        self,
        name: str,
        cursor: Cursor,
        source: EntrySource,
        scheduler: Scheduler,
        limits: DispatchLimits,
        stats: SubscriptionStats,
        selection: ConsumerSelection,
        in_flight: InFlightEntries,
    ) -> None:
        self._name = name
        self._cursor = cursor
        self._source = source
        self._scheduler = scheduler
        self._limits = limits
        self._stats = stats
        self._selection = selection
        # Bound once for the per-entry path (the containers are only ever cleared).
        self._flights = in_flight.entries
        self._replay = in_flight.replay
        self._replay_set = in_flight.replay_set
        self._redelivery_counts = in_flight.redelivery_counts
        self._add_replay = in_flight.add_replay
        self._any_consumer_ready = selection.any_ready
        self._choose_consumer = selection.choose
        self._delayed = DelayedDeliveries(scheduler, self._release_delayed)
        self._delayed_set = self._delayed.positions
        self.read_position = source.next_position(cursor.mark_delete_position)
        self._dispatch_scheduled = False
        self._pass_this_turn = False
        self._dispatching = False
        self._closed = False
        # Consumers already told REACHED_END_OF_TOPIC (once each, as Java).
        self._told_end: set[Consumer] = set()
        self._entries = self._new_loader(source)
        # Rule 5: this pass's deliveries per consumer, in order, and their entry bytes.
        self._runs: dict[Consumer, list[RunItem]] = {}
        self._run_bytes = 0

    def _new_loader(self, source: EntrySource) -> EntryLoader:
        return EntryLoader(
            self._name,
            source,
            self._scheduler,
            self.schedule,
            self._selection.read_budget,
            max_entries=self._limits.max_read_entries,
            max_bytes=self._limits.max_read_bytes,
        )

    # ------------------------------------------------------------------ state changes

    def use_source(self, source: EntrySource) -> None:
        """Read through ``source`` from now on, from the entry after the mark-delete."""
        self._entries.close()
        self._source = source
        self._entries = self._new_loader(source)
        self.read_position = source.next_position(self._cursor.mark_delete_position)

    def restart_at(self, position: Position) -> None:
        """Read from ``position`` on (a seek); nothing is held back any more."""
        self.read_position = position
        self._delayed.clear()
        self._entries.invalidate()  # a read still in flight is for the old position

    def skip_acknowledged(self) -> None:
        """The mark-delete moved (skip, expiry): read on from after it if the read position is
        behind."""
        self.read_position = max(
            self.read_position, self._source.next_position(self._cursor.mark_delete_position)
        )

    def forget(self, position: Position) -> None:
        """``position`` is fully acknowledged: drop every trace of it (in flight, redelivery
        count, replay, held entry)."""
        flight = self._flights.pop(position, None)
        if flight is not None:
            flight.release(position)
        self._redelivery_counts.pop(position, None)
        self._replay_set.discard(position)
        self._entries.release(position)

    def consumer_removed(self, consumer: Consumer) -> None:
        self._told_end.discard(consumer)

    def delayed_count(self) -> int:
        return len(self._delayed_set)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._entries.close()
        self._delayed.close()

    # ------------------------------------------------------------------ the loop

    def schedule(self) -> None:
        if self._dispatch_scheduled or self._closed:
            return
        self._dispatch_scheduled = True
        self._scheduler.call_later(0, self._run_dispatch)

    def dispatch_soon(self) -> None:
        """Permits came back: a consumer starved of them waits for nothing but this pass, so it
        runs now, in this turn, unless a pass already ran in it or is scheduled (one read batch
        per subscription and turn, issue #24). A tailing consumer's FLOW to MESSAGE round trip
        is then one turn shorter, and that round trip is what bounds its rate."""
        if self._pass_this_turn or self._dispatch_scheduled or self._closed:
            self.schedule()
            return
        self._run_dispatch()

    def _run_dispatch(self) -> None:
        self._dispatch_scheduled = False
        if self._closed or self._dispatching:
            return
        if not self._pass_this_turn:
            self._pass_this_turn = True
            # Set before any pass this one schedules, so it runs first in the next turn
            # (callbacks due at once run in the order they were set).
            self._scheduler.call_later(0, self._turn_over)
        self._dispatching = True
        try:
            self.dispatch()
        finally:
            self._dispatching = False

    def _turn_over(self) -> None:
        self._pass_this_turn = False

    def dispatch(self) -> None:
        """Send as much as permits and socket buffers allow (rule 2: without waiting)."""
        if not self._selection.consumers:
            return
        self._selection.begin_pass(
            self._limits.max_read_entries, precise=self._limits.precise_flow_control
        )
        try:
            if self._dispatch_replay():
                self._dispatch_new()
        finally:
            self._selection.end_pass()
            self._send_runs()

    def _send_runs(self) -> None:
        """Hand each consumer its run of this pass (rule 5)."""
        runs = self._runs
        if not runs:
            return
        self._runs = {}
        self._run_bytes = 0
        for consumer, run in runs.items():
            consumer.sink.send_messages(consumer.consumer_id, run)

    def _dispatch_replay(self) -> bool:
        """Redeliver what is due, up to one read batch per turn (as new entries: a consumer
        given back 100,000 entries must not hold the loop for all of them); False if new
        entries must wait: a replayed entry is being read from disk, or more are due than this
        turn's batch (the next pass is scheduled)."""
        deferred: list[Position] = []
        waiting = False
        budget = self._limits.max_read_entries
        while self._replay and self._any_consumer_ready():
            if budget <= 0:
                waiting = True
                self.schedule()
                break
            position = heapq.heappop(self._replay)
            budget -= 1
            if position not in self._replay_set:
                continue
            if self._cursor.is_deleted(position):
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
                if self._selection.sub_type != SubType.Key_Shared:
                    break
                # Key_Shared looks past an entry whose consumer is full, for the others' entries,
                # as before: not counted, or a full consumer would starve the rest.
                budget += 1
            else:
                self._entries.release(position)
                self._replay_set.discard(position)
        for position in deferred:
            heapq.heappush(self._replay, position)
        return not waiting

    def _dispatch_new(self) -> None:
        """One read batch (``dispatcherMaxReadBatchSize`` entries) per turn of the loop, then
        the next pass is scheduled. As Java's dispatcher, which writes and flushes each read
        batch: a consumer with 1000 permits gets its first messages after 100 entries' work,
        not 1000 (its client decodes while the broker sends the rest, and its next FLOW comes
        back sooner), and one subscription catching up never holds every other connection on
        the loop for the whole of its permits."""
        if not self._any_consumer_ready():
            return
        batch = self._entries.batch(self.read_position)
        if not batch:
            if batch is not None:
                self._maybe_reached_end()
            return  # the end, or a disk read that dispatches again when it completes
        last: Position | None = None
        for position, entry in batch:
            if not self._any_consumer_ready():
                break
            last = position
            if self._cursor.is_deleted(position) or position in self._flights:
                continue
            if position in self._replay_set or position in self._delayed_set:
                continue
            if not self._deliver(position, entry, from_replay=False):
                self._add_replay(position)
        # The batch is done, or this pass's share of it (an Exclusive/Failover pass sends at
        # most one read batch, replays included): the next pass, if it would send anything.
        if self._selection.ready_for_pass():
            self.schedule()
        if last is not None:
            # Once per batch, not per entry (a segment table lookup): the batch is contiguous.
            self.read_position = max(self.read_position, self._source.next_position(last))

    def _maybe_reached_end(self) -> None:
        """Past the last entry of a terminated topic: tell each consumer once (Java sends
        REACHED_END_OF_TOPIC when a read finds no more entries on a terminated topic)."""
        if not getattr(self._source, "terminated", False):
            return
        if self.read_position <= self._source.last_confirmed_position():
            return
        for consumer in self._selection.consumers:
            if consumer not in self._told_end:
                self._told_end.add(consumer)
                notify = getattr(consumer.sink, "reached_end_of_topic", None)
                if notify is not None:
                    notify(consumer.consumer_id)

    def _deliver(self, position: Position, entry: bytes, *, from_replay: bool) -> bool:
        """Try to send one entry; False means "keep it for later" (no consumer can take it)."""
        metadata = self._source.entry_metadata(position, entry)
        if metadata is None:
            # Unreadable (an older build's write, or damage the CRC cannot see): it can never
            # be delivered, so it is acknowledged here rather than left to hold back the
            # mark-delete and every message after it. The topic logged and counted it.
            self._cursor.delete([position])
            self.forget(position)
            self._stats.unreadable_skipped += 1
            return True
        if self._should_delay(position, metadata):
            return True
        batch_size = max(1, metadata.num_messages)
        ack_set = self._cursor.batch_ack_set(position) if self._limits.batch_index_ack else None
        hidden = hidden_indexes(self._source, position)
        if hidden:
            # Issue #16: duplicate keys of a partly duplicate batch, hidden from everybody
            # through the PIP-54 ack set (sent even with batch-index acks off).
            ack_set = visible_ack_set(ack_set, hidden, batch_size)
        unacked = batch_size if ack_set is None else unacked_indexes(ack_set, batch_size)
        if unacked == 0:
            # Every index is acknowledged (stray bits past the batch kept the entry alive).
            self._cursor.delete([position])
            self.forget(position)
            return True
        consumer = self._choose_consumer(metadata, position)
        if consumer is None:
            return False
        run = self._runs.get(consumer)
        if run is None:
            run = self._runs[consumer] = []
        run.append((position, entry, self._redelivery_counts.get(position, 0), ack_set))
        self._run_bytes += len(entry)
        if self._run_bytes >= WRITE_THROUGH_BYTES:
            self._send_runs()
            self._selection.sink_written()
        consumer.permits -= batch_size if consumer.returns_permits_for_skipped else unacked
        consumer.unacked_messages += unacked
        consumer.messages_out += unacked
        consumer.pending.add(position)
        self._flights[position] = InFlight(consumer, batch_size, unacked)
        self._stats.msg_out += unacked
        self._stats.bytes_out += len(entry)
        if from_replay:
            self._stats.msg_redelivered += unacked
        return True

    # ------------------------------------------------------------------ delayed delivery

    def _should_delay(self, position: Position, metadata: EntryMetadata) -> bool:
        deliver_at = metadata.deliver_at_time
        if (
            not deliver_at
            or not self._limits.delayed_delivery
            or self._selection.sub_type not in (SubType.Shared, SubType.Key_Shared)
        ):
            return False
        if not self._delayed.defer(position, deliver_at):
            return False
        self._stats.delayed = len(self._delayed_set)
        return True

    def _release_delayed(self, due: list[Position]) -> None:
        for position in due:
            if not self._cursor.is_deleted(position):
                self._add_replay(position)
        self._stats.delayed = len(self._delayed_set)
        self.schedule()


class AtMostOnceDispatcher(Dispatcher):
    """Acknowledges an entry the moment it is sent (non-persistent topics): a consumer that
    disconnects gets nothing redelivered, and no other consumer gets it again."""

    def _deliver(self, position: Position, entry: bytes, *, from_replay: bool) -> bool:
        delivered = super()._deliver(position, entry, from_replay=from_replay)
        if delivered and not self._cursor.is_deleted(position):
            self._cursor.delete([position])
            self.forget(position)
        return delivered
