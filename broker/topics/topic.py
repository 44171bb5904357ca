"""A persistent topic: the single writer of its ledger, its producers and its subscriptions.

``Topic`` coordinates the parts of one topic, each in a module of its own:

* publishing: ``broker/publish/publisher.py`` (admission, dedup and idempotency checks, the
  group commit, PIP-6 snapshots), which answers each SEND with a value;
* producers and their PIP-68 access: ``broker/publish/producers.py``;
* dispatch: one ``broker/dispatch/subscription.py`` per subscription, which reads the topic's
  durable entries through the methods of ``EntrySource`` below;
* positions for seeks and readers: ``broker/topics/positions.py``;
* compaction: ``broker/compaction/``; counters: ``broker/topics/stats.py``.

Thread-safety: everything here runs on the event loop, except the ledger flush (asyncio's default
executor: a receipt never queues behind reads, see broker/blocking.py), the disk work of
``broker/blocking.py`` (cold reads for dispatch, GET_LAST_MESSAGE_ID and seek by time, cursor
persistence, trimming, close) and the load/recovery step (worker thread, before the topic is
visible to anybody). Reads in disk threads run concurrently with appends and flushes: see the
thread-safety notes of ``broker.storage.Ledger``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from broker.blocking import run_blocking, run_to_completion, submit_blocking
from broker.compaction.compactor import COMPACTION_CURSOR, TopicCompaction
from broker.compaction.reads import CompactedEntrySource
from broker.config import BrokerConfig
from broker.dispatch.entry_loader import UNLIMITED_BYTES
from broker.dispatch.subscription import DispatchLimits, Subscription
from broker.errors import NotAllowed, ServiceNotReady, TopicTerminated
from broker.publish.dedup import DedupState, MessageDeduplication
from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.publish.idempotency_window import IDEMPOTENCY_CURSOR, IdempotencyWindow
from broker.publish.producers import Producer, ProducerRegistry
from broker.publish.publication import Settled
from broker.publish.publisher import Publisher
from broker.publish.write_barrier import WriteBarrier
from broker.rates import RateMeter
from broker.storage import Cursor, Ledger, LedgerConfig, Position, StorageError
from broker.storage.files import OS_FILES
from broker.topics.housekeeping import Housekeeping
from broker.topics.positions import first_read_position, last_confirmed_position
from broker.topics.stats import TopicStats
from protocol.enums import InitialPosition
from protocol.errors import RemoteProtocolError
from protocol.ids import MessageId
from protocol.metadata import ChunkInfo, EntryMetadata, parse_entry_metadata
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)

_NOTHING_UNREADABLE: frozenset[Position] = frozenset()
#: Ledger property set (to 1) by the admin ``terminate``: no message is accepted after it.
TERMINATED_PROPERTY = "pulsar.terminated"


def housekeeping_period(config: BrokerConfig) -> float:
    """The cursor-persist interval, capped to [0.05, 1] s, and no longer than the dedup
    snapshot period, so neither waits a whole extra period for its turn."""
    tick = max(0.05, min(1.0, config.managed_ledger_cursor_persist_interval_ms / 1000))
    frequency = config.broker_deduplication_snapshot_frequency_in_seconds
    return min(tick, float(frequency)) if frequency > 0 else tick


def ledger_config_from(config: BrokerConfig) -> LedgerConfig:
    return LedgerConfig(
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        max_size_per_ledger_bytes=config.managed_ledger_max_size_per_ledger_mbytes * 1024 * 1024,
        cache_size_bytes=config.managed_ledger_cache_size_mb * 1024 * 1024,
        sync_data=config.journal_sync_data,
        direct_io=config.db_storage_direct_io_entry_logger,
        retention_time_minutes=config.default_retention_time_in_minutes,
        retention_size_mb=config.default_retention_size_in_mb,
        max_batch_deleted_index_to_persist=config.managed_ledger_max_batch_deleted_index_to_persist,
        persist_interval_s=config.managed_ledger_cursor_persist_interval_ms / 1000,
    )


class Topic:
    """One persistent topic (non-partitioned, or one partition of a partitioned topic)."""

    def __init__(
        self,
        name: TopicName,
        ledger: Ledger,
        config: BrokerConfig,
        *,
        dedup: MessageDeduplication[Position] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``dedup`` is the recovered state (`recover_dedup`), None when dedup is off.
        ``clock`` is the monotonic clock of dedup's timers (tests substitute a fake one)."""
        if dedup is not None and dedup.state is not DedupState.READY:
            raise ValueError("a topic needs a fully recovered dedup state")
        self.name = name
        self.ledger = ledger
        self.config = config
        self.stats = TopicStats()
        self.subscriptions: dict[str, Subscription] = {}
        # Accepted writes (staged or in a flush group) until durable or failed: a PIP-68 grant
        # waits on it so no earlier holder's entry becomes durable after the grant.
        self._writes = WriteBarrier()
        self.producers = ProducerRegistry(ledger, self._writes)
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._rates = RateMeter(self.rate_counters())
        self._closed = False
        #: The publish path (module docstring); it owns the PIP-6 and idempotency state.
        self.publisher = Publisher(
            name,
            ledger,
            config,
            stats=self.stats,
            producers=self.producers,
            writes=self._writes,
            dedup=dedup,
            wake_readers=self._wake_readers,
            clock=clock,
        )
        self.publisher.terminated = ledger.properties.get(TERMINATED_PROPERTY, 0) == 1
        # Entries whose metadata does not parse (item 1 of issue #10): skipped by every reader.
        # The shared empty frozenset until the first one (rare).
        self._unreadable: set[Position] | frozenset[Position] = _NOTHING_UNREADABLE
        self._limits = DispatchLimits(
            max_read_entries=config.dispatcher_max_read_batch_size,
            max_read_bytes=config.dispatcher_max_read_size_bytes,
            batch_index_ack=config.acknowledgment_at_batch_index_level_enabled,
            precise_flow_control=config.precise_dispatcher_flow_control,
            delayed_delivery=config.delayed_delivery_enabled,
            delayed_tick_seconds=config.delayed_delivery_tick_time_millis / 1000,
        )
        #: Compaction (issue #14): the compacted view, runs, their status.
        self.compaction = TopicCompaction(self, OS_FILES)
        #: Backlog bytes that start a compaction by themselves (0: never); set from the
        #: namespace policy or brokerServiceCompactionThresholdInBytes.
        self.compaction_threshold_bytes = config.broker_service_compaction_threshold_in_bytes
        self._housekeeping_period = housekeeping_period(config)
        Housekeeping.for_loop(self._loop).add(self)
        for cursor in ledger.cursors.values():
            if cursor.name not in (DEDUP_CURSOR, COMPACTION_CURSOR, IDEMPOTENCY_CURSOR):
                self._attach_subscription(cursor.name, cursor, durable=True)

    # ------------------------------------------------------------------ publishing

    @property
    def dedup(self) -> MessageDeduplication[Position] | None:
        """The PIP-6 state (None: dedup is off); the publisher owns it."""
        return self.publisher.dedup

    @property
    def dedup_enabled(self) -> bool:
        return self.publisher.dedup is not None

    @property
    def idempotency(self) -> IdempotencyWindow | None:
        """The idempotency-key window (issue #16); the publisher owns it."""
        return self.publisher.idempotency

    @idempotency.setter
    def idempotency(self, window: IdempotencyWindow | None) -> None:
        self.publisher.idempotency = window

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        entry: bytes,
        chunk: ChunkInfo | None = None,
        *,
        num_messages: int = 1,
    ) -> asyncio.Future[Position | None]:
        """Accept one entry; the future resolves when it is durable, for callers that await
        one entry. Resolves to ``None`` for a duplicate (receipt ``-1:-1``), to its original's
        position for an idempotency-key duplicate; raises synchronously as ``submit`` does."""
        future: asyncio.Future[Position | None] = self._loop.create_future()
        outcome = self.publisher.submit(
            producer, sequence_id, highest_sequence_id, entry, chunk, num_messages, None, future
        )
        if isinstance(outcome, Settled):
            future.set_result(outcome.position)
        return future

    def hidden_indexes(self, position: Position) -> int:
        """Batch indexes of ``position`` no subscription or reader may deliver (issue #16)."""
        window = self.publisher.idempotency
        return 0 if window is None else window.hidden_indexes(position)

    def _wake_readers(self) -> None:
        """New durable entries: every subscription may dispatch, now."""
        for sub in self.subscriptions.values():
            sub.entries_durable()

    async def set_dedup_enabled(self, enabled: bool) -> None:
        """Apply a dedup policy change (``Publisher.set_dedup_enabled``)."""
        await self.publisher.set_dedup_enabled(enabled)

    # ------------------------------------------------------------------ producers

    async def add_producer(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Admit a producer (PIP-68 rules); False = queued as a WaitForExclusive waiter."""
        self._refuse_if_closed()
        if self.publisher.terminated:
            raise TopicTerminated(f"Topic {self.name.full_name} was terminated")
        self._poke_housekeeping()  # its chores are due every period again
        ready = await self.producers.add(producer, requested_epoch)
        if not ready:
            self.producers.producer_queued(producer)
        if self.dedup is not None:
            self.dedup.producer_connected(producer.name)
        return ready

    @property
    def terminated(self) -> bool:
        return self.publisher.terminated

    async def terminate(self) -> Position:
        """Pulsar's topic termination: nothing is accepted any more, so the last message stays
        the last; returns its position. Durable (a ledger property) before it returns. SENDs are
        refused from the call on; what was accepted before settles first; then the producers are
        told to go (they reconnect and get TopicTerminatedError)."""
        if not self.publisher.terminated:
            self.publisher.terminated = True
            await self._writes.wait_for_accepted()
            await run_to_completion(self.ledger.set_property, TERMINATED_PROPERTY, 1)
            for producer in list(self.producers.producers):
                producer.sink.close_producer(producer)
            for sub in self.subscriptions.values():
                sub.schedule_dispatch()  # those at the end learn it now (REACHED_END_OF_TOPIC)
        return self.last_confirmed_position()

    async def remove_producer(self, producer: Producer) -> None:
        self.publisher.producer_reconnected(producer)
        if self._closed:
            # close() told every producer and waiter to go. A holder leaving now must not
            # promote a waiter: the grant would write the epoch into a closed ledger.
            return
        if producer not in self.producers.producers and not self.producers.access.is_waiting(
            producer
        ):
            return
        await self.producers.remove(producer)
        if self.dedup is not None:
            self.dedup.producer_disconnected(producer.name, self._clock())

    def last_sequence_id(self, producer_name: str) -> int:
        """PRODUCER_SUCCESS.last_sequence_id: -1 without dedup or history (as Java)."""
        if self.dedup is None:
            return -1
        return self.dedup.last_sequence_id(producer_name)

    # ------------------------------------------------------------------ reads

    def read_cached(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]] | None:
        """Entries from ``position`` on as far as memory holds them; None if the disk is needed
        (the hot path of dispatch, on the loop)."""
        return self.ledger.read_cached(position, max_entries, max_bytes)

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> asyncio.Future[list[tuple[Position, bytes]]]:
        """``Ledger.read`` in a disk thread (cold reads, index builds); see broker/blocking.py."""
        return submit_blocking(self.ledger.read, position, max_entries, max_bytes)

    async def read_entry(self, position: Position) -> bytes | None:
        """The entry at ``position`` (None if it is not stored), from disk off the loop."""
        found = self.ledger.read_cached(position, 1, UNLIMITED_BYTES)
        if found is None:
            found = await run_blocking(self.ledger.read, position, 1, UNLIMITED_BYTES)
        if found and found[0][0] == position:
            return found[0][1]
        return None

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata | None:
        """The entry's metadata facts, or None for an unreadable entry (logged and counted once
        per position, then remembered: every reader skips it)."""
        # Parsed each time, not cached: the compiled parse (a varint walk) costs less than a
        # cache's insert and eviction, and most entries are read once per subscription.
        if self._unreadable and position in self._unreadable:
            return None
        try:
            return parse_entry_metadata(entry)
        except RemoteProtocolError as exc:
            self._note_unreadable(position, exc)
            return None

    def _note_unreadable(self, position: Position, exc: Exception) -> None:
        if not isinstance(self._unreadable, set):
            self._unreadable = set()
        self._unreadable.add(position)
        self.stats.unreadable_entries += 1
        log.warning(
            "%s: skipping unreadable entry %s:%s: %s",
            self.name.full_name,
            position.ledger_id,
            position.entry_id,
            exc,
        )

    def next_position(self, position: Position) -> Position:
        return self.ledger.next_position(position)

    def last_confirmed_position(self) -> Position:
        """The last durable entry, or "before the first" for a topic that has none."""
        return last_confirmed_position(self.ledger)

    async def last_message_id(self, sub: Subscription) -> tuple[MessageId, MessageId | None]:
        """GET_LAST_MESSAGE_ID: the last entry (with its batch index) and the mark-delete."""
        last = self.last_confirmed_position()
        mark = sub.cursor.mark_delete_position
        mark_id = MessageId(mark.ledger_id, mark.entry_id) if mark.ledger_id >= 0 else None
        if sub.read_compacted:
            compacted_last = await self.compacted_source().last_message_id(self.name.partition)
            if compacted_last is not None:
                return compacted_last, mark_id
        found = await self._last_readable_entry(last) if last.entry_id >= 0 else None
        if found is None:
            return MessageId(-1, -1), mark_id
        position, meta = found
        batch_index = meta.num_messages - 1 if meta.is_batch else -1
        hidden = self.hidden_indexes(position)
        while hidden and batch_index > 0 and hidden >> batch_index & 1:
            batch_index -= 1  # issue #16: readers must not wait for a hidden last message
        # With the partition index, as Pulsar answers: the official clients compare it with the
        # ids of the messages they received, which carry it too.
        partition = self.name.partition
        return MessageId(position.ledger_id, position.entry_id, partition, batch_index), mark_id

    async def _last_readable_entry(self, last: Position) -> tuple[Position, EntryMetadata] | None:
        """The newest entry at or before ``last`` whose metadata parses.

        Readers skip unreadable entries, so GET_LAST_MESSAGE_ID must not name one: a reader
        would then see ``has_message_available()`` true with nothing left to receive. Walks back
        over unreadable entries only (they are rare: an older build's writes, or damage).
        """
        position: Position | None = last
        while position is not None:
            entry = await self.read_entry(position)
            if entry is None:
                return None
            meta = self.entry_metadata(position, entry)
            if meta is not None:
                return position, meta
            position = self.ledger.previous_position(position)
        return None

    # ------------------------------------------------------------------ subscriptions

    def _attach_subscription(self, name: str, cursor: Cursor, *, durable: bool) -> Subscription:
        if durable:
            # An admin reset or skip on a subscription without consumers dirties the cursor of
            # a quiet topic: its persistence must not wait for a backed-off turn.
            cursor.on_dirty = self._poke_housekeeping
        sub = Subscription(
            name,
            cursor,
            self,
            self._loop,
            self._limits,
            durable=durable,
            on_empty=None if durable else self._drop_non_durable,
        )
        self.subscriptions[name] = sub
        return sub

    def _drop_non_durable(self, sub: Subscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            sub.close()

    async def get_or_create_subscription(
        self, name: str, *, durable: bool, start: Position | None, initial_earliest: bool
    ) -> Subscription:
        """Find a subscription or create it at its initial position.

        Durable: Latest = mark-delete at the last entry, Earliest = before the first entry; an
        existing subscription keeps its position. Non-durable (readers): start is inclusive.
        A new durable cursor is positioned on the loop (now) and its file written in a disk
        thread, under the cursor-file lock, so two SUBSCRIBEs racing for one name get one
        cursor and a delete of the same name cannot interleave with the write.
        """
        self._refuse_if_closed()
        self._poke_housekeeping()  # a consumer is on its way
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        if durable and name == DEDUP_CURSOR:
            # The PIP-6 snapshot lives on that cursor: acks must never move it.
            raise NotAllowed(f"Subscription name {DEDUP_CURSOR} is reserved")
        if name == IDEMPOTENCY_CURSOR:
            # The idempotency window's snapshot lives on it (issue #16), as PIP-6's above.
            raise NotAllowed(f"Subscription name {IDEMPOTENCY_CURSOR} is reserved")
        if name == COMPACTION_CURSOR:
            # It names the current compacted view: acks must never move it.
            raise NotAllowed(f"Subscription name {COMPACTION_CURSOR} is reserved")
        if not durable:
            begin = start if start is not None else first_read_position(self.ledger)
            cursor = self.ledger.new_non_durable_cursor(begin)
            return self._attach_subscription(name, cursor, durable=False)
        async with self.cursor_io:
            existing = self.subscriptions.get(name)
            if existing is not None:
                return existing
            found = self.ledger.cursors.get(name)
            if found is None:
                initial = InitialPosition.Earliest if initial_earliest else InitialPosition.Latest
                fresh = self.ledger.new_cursor(name, initial)
                await run_to_completion(fresh.persist)
                found = self.ledger.add_cursor(fresh)
            self._refuse_if_closed()  # closed during the write: close() saw no such subscription
            return self._attach_subscription(name, found, durable=True)

    @property
    def dispatch_limits(self) -> DispatchLimits:
        """What every subscription of this topic dispatches by (from the broker's config)."""
        return self._limits

    @property
    def closed(self) -> bool:
        """Closed or closing (unload, delete, shutdown): nothing new may attach to it."""
        return self._closed

    @property
    def cursor_io(self) -> asyncio.Lock:
        """Held around cursor-file I/O (compaction persists the ``__compaction`` cursor).

        It serialises the housekeeping's cursor persistence with deleting the dedup cursor, so
        a periodic persist cannot write back a cursor that disabling dedup just deleted. The
        publisher holds it (made on first use: most loaded topics never touch a cursor file)."""
        return self.publisher.cursor_io

    def compacted_source(self) -> CompactedEntrySource:
        """Entries for readCompacted subscriptions (`broker.compaction.reads`)."""
        return CompactedEntrySource(self)

    async def set_read_compacted(self, sub: Subscription, read_compacted: bool) -> None:
        """Make ``sub`` read the compacted view (or not) before its first consumer attaches."""
        if read_compacted:
            # Also when it already reads compacted: a fresh source reads the newest view
            # (sources are pinned to one view, see broker.compaction.reads).
            await self.compaction.ready()
            if not sub.consumers:
                sub.use_source(self.compacted_source(), read_compacted=True)
        elif sub.read_compacted:
            sub.use_source(self, read_compacted=False)

    def on_compacted(self) -> None:
        """A new compacted view is current: compacted readers may have more to read."""
        for sub in self.subscriptions.values():
            if sub.read_compacted:
                sub.schedule_dispatch()

    def _refuse_if_closed(self) -> None:
        # A PRODUCER or SUBSCRIBE that was on its way here when the topic was unloaded: a
        # subscription attached now would never dispatch. The client retries and finds the
        # reloaded topic (Java answers ServiceNotReady for a fenced/closing topic too).
        if self._closed:
            raise ServiceNotReady(f"Topic {self.name.full_name} is being unloaded; retry")

    async def delete_subscription(self, name: str) -> None:
        """Drop a subscription and, for a durable one, its cursor file (in a disk thread)."""
        sub = self.subscriptions.pop(name, None)
        if sub is None:
            return
        if sub.durable:
            self.ledger.detach_cursor(name)  # first: closing must not persist a doomed cursor
        sub.close()
        if sub.durable:
            async with self.cursor_io:
                await run_to_completion(self.ledger.remove_cursor_file, name)

    # ------------------------------------------------------------------ housekeeping

    @property
    def housekeeping_period(self) -> float:
        """Seconds between two runs of this topic's chores (``housekeeping.py``)."""
        return self._housekeeping_period

    def housekeep(self, now: float) -> bool | None:
        """The in-memory chores (on the loop, from the broker-wide ``Housekeeping``): rates,
        time-based dedup snapshot, inactive-producer purge, compaction trigger. Returns True
        if there is disk work (a cursor due for persistence, a segment to trim), None if the
        topic is quiet (no producer, no consumer, no disk work: its chores may wait)."""
        self._rates.sample(self.rate_counters())
        self.publisher.maybe_snapshot_dedup_by_time()
        self.publisher.maybe_purge_inactive_producers()
        self.compaction.maybe_trigger(self.compaction_threshold_bytes)
        if self._closed:
            return False
        cursors = self.ledger.cursors.values()
        if any(c.wants_persist(now) for c in cursors) or self.ledger.trim_due():
            return True
        return None if self._quiet() else False

    def _poke_housekeeping(self) -> None:
        Housekeeping.for_loop(self._loop).poke(self)

    def _quiet(self) -> bool:
        """Nothing attached that could publish, dispatch or acknowledge."""
        producers = self.producers
        if producers.producers or producers.access.stats().waiters:
            return False
        return not any(sub.consumers for sub in self.subscriptions.values())

    async def housekeep_disk(self) -> None:
        """Cursor persistence and trimming, in disk threads."""
        async with self.cursor_io:
            if self._closed:
                return  # close persists the cursors itself, and trimming waits for a reload
            await run_to_completion(self._persist_cursors, time.monotonic())
        if not self._closed:
            await run_to_completion(self.ledger.trim)

    def _persist_cursors(self, now: float) -> None:
        for cursor in list(self.ledger.cursors.values()):
            cursor.maybe_persist(now)

    def _persist_dirty_cursors(self) -> None:
        for cursor in list(self.ledger.cursors.values()):
            if cursor.dirty:
                cursor.persist()

    async def close(self) -> None:
        """Flush what is pending, snapshot dedup, persist cursors, close the ledger (unload)."""
        if self._closed:
            return
        self._closed = True
        Housekeeping.for_loop(self._loop).remove(self)
        await self.publisher.close()  # what was accepted is written and answered first
        await self.compaction.close()
        # Grants still persisting an epoch finish now; none starts after (it would write into
        # the folder a reloaded instance may already be recovering).
        await self.producers.close()
        # As Java on unload: producers are told to go (CLOSE_PRODUCER) once their receipts are
        # out, so they reconnect to the reloaded topic instead of failing their next SEND.
        for producer in list(self.producers.producers):
            producer.sink.close_producer(producer)
        # Persisted here, in a disk thread: closing a subscription persists its cursor before
        # telling the consumers to go, and then finds it clean (unless acked meanwhile).
        async with self.cursor_io:
            try:
                await run_blocking(self._persist_dirty_cursors)
            except (OSError, StorageError) as exc:
                log.warning("%s: persisting cursors before close: %s", self.name.full_name, exc)
        for sub in self.subscriptions.values():
            sub.close()
        self.publisher.snapshot_on_close()  # ledger.close persists the snapshots' cursors
        async with self.cursor_io:
            await run_blocking(self.ledger.close)

    async def abandon(self) -> None:
        """Test hook: stop as if the process died (kill -9). Nothing is flushed, snapshotted or
        persisted; a flush already running in its thread completes, as it would on disk, but
        nobody is answered. Reopen the directory to recover."""
        self._closed = True
        Housekeeping.for_loop(self._loop).remove(self)
        self.compaction.abandon()
        await self.publisher.abandon()
        self._writes.release_all()
        # Subscriptions are left as they are: closing them would persist their cursors.
        await run_blocking(self.ledger._abandon)

    def rate_counters(self) -> tuple[int, int, int, int]:
        """Messages in, bytes in, messages out, bytes out (out: over the subscriptions)."""
        subs = self.subscriptions.values()
        return (
            self.stats.msg_in,
            self.stats.bytes_in,
            sum(s.stats.msg_out for s in subs),
            sum(s.stats.bytes_out for s in subs),
        )

    def rates(self) -> tuple[float, float, float, float]:
        """msgRateIn, msgThroughputIn, msgRateOut, msgThroughputOut (per second)."""
        rate_in, throughput_in, rate_out, throughput_out = self._rates.rates(self.rate_counters())
        return rate_in, throughput_in, rate_out, throughput_out
