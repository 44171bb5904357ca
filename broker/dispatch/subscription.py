"""A subscription: a cursor, its consumers, and the dispatch of entries to them.

``Subscription`` coordinates; each concept has a module of its own:

* ``broker.dispatch.consumer_selection``: which consumer gets an entry (Exclusive, Failover,
  Shared, Key_Shared);
* ``broker.dispatch.dispatcher``: the dispatch loop (replay first, then new entries, never
  waiting for the disk), its limits and counters;
* ``broker.dispatch.acknowledgements``: ACKs applied to the cursor, PIP-54 batch-index ack sets;
* ``broker.dispatch.in_flight``: entries in flight, the replay queue, redelivery counts;
* ``broker.dispatch.delayed_delivery``: entries held back until their delivery time.

Rules this module keeps:

1. The cursor (``broker.storage.Cursor``) is the only durable state: mark-delete, individual acks,
   PIP-54 batch-index bitsets. Everything else here (read position, in-flight entries, replay,
   delayed) is rebuilt from the cursor after a restart or a topic reload, so acknowledged
   messages are never redelivered and unacknowledged ones always are (up to what the cursor had
   persisted when the process died: see ``Cursor.maybe_persist``).
2. Nothing here does socket I/O: messages go out through ``ConsumerSink``; timers through a
   ``Scheduler`` (the event loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.dispatch.acknowledgements import Acknowledgements
from broker.dispatch.consumer import Consumer
from broker.dispatch.consumer_selection import ConsumerSelection
from broker.dispatch.dispatcher import (
    AtMostOnceDispatcher,
    Dispatcher,
    DispatchLimits,
    SubscriptionStats,
)
from broker.dispatch.entry_loader import Scheduler
from broker.dispatch.entry_source import EntrySource
from broker.dispatch.in_flight import InFlightEntries
from broker.errors import ConsumerBusy, NotAllowed
from broker.storage import Cursor, Position, StorageError
from protocol.enums import SubType

# A subscription is built from a source and limits: its callers import them from here too.
__all__ = ["DispatchLimits", "EntrySource", "Subscription"]

log = logging.getLogger(__name__)


class Subscription:
    """One named subscription of a topic."""

    #: Run a dispatch pass soon (the dispatcher's own method).
    schedule_dispatch: Callable[[], None]
    #: New entries are durable: a pass now, unless one ran this turn (the publish path).
    entries_durable: Callable[[], None]
    #: Send as much as permits and socket buffers allow, now.
    dispatch: Callable[[], None]

    def __init__(
        self,
        name: str,
        cursor: Cursor,
        source: EntrySource,
        scheduler: Scheduler,
        limits: DispatchLimits,
        *,
        durable: bool = True,
        at_most_once: bool = False,
        on_empty: Callable[[Subscription], None] | None = None,
    ) -> None:
        """``at_most_once``: every entry counts as acknowledged once sent (non-persistent
        topics: nothing is ever redelivered)."""
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.stats = SubscriptionStats()
        self._source = source
        self._on_empty = on_empty
        self._keep_when_empty = False
        #: Whether entries come through the compacted view (readCompacted, issue #14).
        self.read_compacted = False
        self._selection = ConsumerSelection()
        self._in_flight = InFlightEntries()
        dispatcher_type = AtMostOnceDispatcher if at_most_once else Dispatcher
        self._dispatcher = dispatcher_type(
            name, cursor, source, scheduler, limits, self.stats, self._selection, self._in_flight
        )
        self._acks = Acknowledgements(
            cursor, self._in_flight, self._dispatcher.forget, batch_index_ack=limits.batch_index_ack
        )
        self.schedule_dispatch = self._dispatcher.schedule
        # New durable entries: a tailing consumer waits for nothing else, so they go out in the
        # turn that answers their producers (``Dispatcher.dispatch_soon``), not a turn later.
        self.entries_durable = self._dispatcher.dispatch_soon
        self.dispatch = self._dispatcher.dispatch

    @property
    def sub_type(self) -> SubType | None:
        return self._selection.sub_type

    @property
    def consumers(self) -> list[Consumer]:
        return self._selection.consumers

    def use_source(self, source: EntrySource, *, read_compacted: bool) -> None:
        """Read through ``source`` from now on (readCompacted on or off); only while no consumer
        is attached, so nothing is in flight. The read position restarts after the mark-delete."""
        if self.consumers:
            raise ConsumerBusy("Subscription has consumers with a different readCompacted")
        self._source = source
        self.read_compacted = read_compacted
        self._dispatcher.use_source(source)
        self._in_flight.clear_replay()

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        """Attach a consumer; raises ConsumerBusy per the Java rules."""
        previous_active = self._selection.active()
        self._selection.add(consumer, sub_type)
        self._keep_when_empty = False
        if sub_type == SubType.Failover:
            self._notify_failover(previous_active, announce_to=consumer)
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer, *, redeliver: bool = True) -> None:
        """Detach a consumer (close or disconnect); its unacknowledged entries are redelivered."""
        if consumer not in self.consumers:
            return
        previous_active = self._selection.active()
        self._selection.remove(consumer)
        self._dispatcher.consumer_removed(consumer)
        self._in_flight.give_back(consumer, None, count=redeliver)
        if self.sub_type == SubType.Failover:
            self._notify_failover(previous_active, announce_to=None)
        if not self.consumers and self._on_empty is not None and not self._keep_when_empty:
            self._on_empty(self)
        self.schedule_dispatch()

    def active_consumer(self) -> Consumer | None:
        """The consumer that receives everything in Exclusive/Failover mode."""
        return self._selection.active()

    def _notify_failover(self, previous: Consumer | None, announce_to: Consumer | None) -> None:
        active = self._selection.active()
        if active is not previous:
            if previous is not None and previous in self.consumers:
                # A newly preferred consumer takes over: hand back what the old one holds.
                self._in_flight.give_back(previous, None, count=False)
            for c in self.consumers:
                c.sink.active_consumer_change(c.consumer_id, c is active)
        elif announce_to is not None:
            announce_to.sink.active_consumer_change(announce_to.consumer_id, announce_to is active)

    def disconnect_all(self) -> list[Consumer]:
        """Broker-initiated close of every consumer (seek, unload, delete)."""
        closing = list(self.consumers)
        for consumer in closing:
            consumer.sink.close_consumer(consumer.consumer_id)
        self._selection.clear()
        return closing

    # ------------------------------------------------------------------ flow / acks

    def add_permits(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self._dispatcher.dispatch_soon()

    def acknowledge(
        self, consumer: Consumer | None, acks: list[tuple[Position, list[int] | None]]
    ) -> None:
        """Individual acks (``Acknowledgements.individual``: PIP-54 ack sets included)."""
        self._acks.individual(self._source, acks)
        self.schedule_dispatch()

    def acknowledge_cumulative(
        self, consumer: Consumer | None, position: Position, ack_set: list[int] | None
    ) -> None:
        """Everything up to ``position`` is consumed (``Acknowledgements.cumulative``); not
        for Shared subscriptions."""
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowed("Cumulative ack is not supported for Shared subscriptions")
        if self._acks.cumulative(self._source, position, ack_set):
            self.schedule_dispatch()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES, with ids (negative acks) or all of them."""
        self._in_flight.give_back(consumer, positions, count=True)
        self.schedule_dispatch()

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
        self._in_flight.clear()
        self._dispatcher.restart_at(position)
        # A reader's subscription survives the seek disconnect (the client re-subscribes).
        self._keep_when_empty = True

    def skip_through(self, position: Position) -> None:
        """Count everything up to ``position`` as consumed, consumers staying connected (admin
        skip-all and message TTL expiry, as Java's ``markDelete`` on the cursor): entries in
        flight there are forgotten, their consumers' acks later are no-ops."""
        self._acks.mark_delete_through(min(position, self._source.last_confirmed_position()))
        self._acks.forget_deleted()
        self._dispatcher.skip_acknowledged()
        self.schedule_dispatch()

    def keep_when_empty(self) -> None:
        self._keep_when_empty = True

    # ------------------------------------------------------------------ queries

    def backlog(self) -> int:
        return self.cursor.backlog()

    def unacked_count(self) -> int:
        """Messages dispatched and not yet acknowledged, over all consumers."""
        return self._in_flight.unacked_count()

    @property
    def closed(self) -> bool:
        """Closed (topic unloaded or deleted, subscription deleted): its cursor is unusable."""
        return self._dispatcher.closed

    def close(self) -> None:
        """Stop dispatching and disconnect the consumers (topic unload, shutdown, deletion).

        The cursor is persisted *before* the consumers are told to go: a client reconnects
        within ~100 ms, possibly to a reloaded topic, which must already see every ack
        (Pulsar #14982: duplicates after an unload with batch-index acks on).
        """
        if self._dispatcher.closed:
            return
        self._dispatcher.close()
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
            "msgDelayed": self._dispatcher.delayed_count(),
            "unreadableEntriesSkipped": self.stats.unreadable_skipped,
            "markDeletePosition": str(self.cursor.mark_delete_position),
            "readPosition": str(self._dispatcher.read_position),
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
