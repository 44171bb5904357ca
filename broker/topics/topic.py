"""A persistent topic: the single writer of its ledger, its producers and its subscriptions.

Publishing (the hot path, see docs/CONTRACTS.md and aesthetics §3 "SEND"):

1. ``submit`` (a connection's SEND, as a ``SendRequest``; ``publish`` wraps it in a future)
   runs the PIP-68 data-path check (a fenced producer never reaches the ledger), then the PIP-6
   dedup check, then *stages* the request: the staged list is the group commit's one queue. It
   never awaits, so a connection keeps reading pipelined SENDs.
2. The group-commit task (``_flush_loop``) hands everything staged to the ledger
   (``Ledger.append_many``, buffered) and runs ``Ledger.flush`` in a worker thread: one write and
   one fdatasync cover the whole group. Entries published meanwhile stay staged for the next
   group. When the flush returns, the requests of the group resolve **in append order**, dedup's
   persisted marks move, subscriptions are told that new entries may be dispatched (only durable
   entries are read), each connection is told once (so it writes the group's receipts in one
   write), and a dedup snapshot is taken every ``brokerDeduplicationEntriesInterval`` entries.
3. A failed flush (EIO, ENOSPC, ...) fails what of the group is not durable (a group spanning a
   segment roll may have its first part durable: that part is completed as usual) *and
   everything staged behind it*, resets dedup's ``pushed := persisted`` for all producers
   (Pulsar #5218), and refuses further SENDs from every producer that lost a message until it
   reconnects (Java fences the topic and disconnects its producers). Why all three:

   * Staging is what makes the failed set exact: the ledger discards every entry that was not
     durable, and nothing is appended to it while a flush runs, so no entry can outlive the
     failure of an entry published before it.
   * The reset makes the client's resend of a failed id a new entry, not a duplicate.
   * A producer whose seq 10 failed may already have seq 11, 12 on the wire. Storing them would
     lift the high-water mark above 10, and the resend of 10 after the reconnect would then be
     answered as a duplicate: lost. Refusing them makes the client resend 10, 11, 12 in order.

Thread-safety: everything here runs on the event loop, except the ledger flush (asyncio's default
executor: a receipt never queues behind reads, see broker/blocking.py), the disk work of
``broker/blocking.py`` (cold reads for dispatch, GET_LAST_MESSAGE_ID and seek by time, cursor
persistence, trimming, close) and the load/recovery step (worker thread, before the topic is
visible to anybody). Reads in disk threads run concurrently with appends and flushes: see the
thread-safety notes of ``broker.storage.Ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.blocking import run_blocking, run_to_completion, submit_blocking
from broker.compaction.compactor import COMPACTION_CURSOR, TopicCompaction
from broker.compaction.reads import CompactedEntrySource
from broker.config import BrokerConfig
from broker.dispatch.entry_loader import UNLIMITED_BYTES
from broker.dispatch.subscription import DispatchLimits, Subscription
from broker.errors import (
    NotAllowed,
    PersistenceError,
    ProducerFenced,
    ServiceNotReady,
    TopicTerminated,
)
from broker.publish.dedup import (
    DedupResult,
    DedupState,
    MessageDeduplication,
)
from broker.publish.dedup_snapshot import (
    DEDUP_CURSOR,
    dedup_config_from,
    exact_batch_highest_sequence_id,
)
from broker.publish.idempotency_keys import entry_keys
from broker.publish.idempotency_snapshot import take_snapshot as take_idempotency_snapshot
from broker.publish.idempotency_window import (
    IDEMPOTENCY_CURSOR,
    Admission,
    IdempotencyWindow,
    Verdict,
)
from broker.publish.producers import Producer, ProducerRegistry
from broker.publish.publication import SendRequest
from broker.publish.write_barrier import WriteBarrier
from broker.rates import RateMeter
from broker.storage import (
    Cursor,
    InitialPosition,
    Ledger,
    LedgerConfig,
    OsFileLayer,
    Position,
    StorageError,
)
from broker.storage.buckets import LATENCY_MS_BOUNDS, Buckets
from protocol.errors import RemoteProtocolError
from protocol.ids import I64_MAX, MessageId
from protocol.metadata import ChunkInfo, EntryMetadata, parse_entry_metadata
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)

_METADATA_CACHE_ENTRIES = 4096
#: Ledger property set (to 1) by the admin ``terminate``: no message is accepted after it.
TERMINATED_PROPERTY = "pulsar.terminated"
# Inactive producers are looked for at most this often; the timeout itself is in minutes.
_PURGE_CHECK_INTERVAL_S = 60.0


@dataclass
class TopicStats:
    # Messages as Pulsar counts them: a batch entry adds its num_messages, a chunk adds 1.
    msg_in: int = 0
    bytes_in: int = 0
    # Milliseconds from accepting a SEND to its entry being durable (Pulsar's storage write
    # latency, pulsar_storage_write_latency_le_*).
    publish_latency_ms: Buckets = field(default_factory=lambda: Buckets(LATENCY_MS_BOUNDS))
    persistence_errors: int = 0
    flushes: int = 0
    unreadable_entries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def ledger_config_from(config: BrokerConfig) -> LedgerConfig:
    return LedgerConfig(
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        max_size_per_ledger_bytes=config.managed_ledger_max_size_per_ledger_mbytes * 1024 * 1024,
        cache_size_bytes=config.managed_ledger_cache_size_mb * 1024 * 1024,
        sync_data=config.journal_sync_data,
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
        self.dedup = dedup
        #: The idempotency-key window (issue #16): set by the loader right after construction
        #: (`recover_window`), before anything can publish; None: keys are not checked.
        self.idempotency: IdempotencyWindow | None = None
        self.stats = TopicStats()
        self.subscriptions: dict[str, Subscription] = {}
        # Accepted writes (staged or in a flush group) until durable or failed: a PIP-68 grant
        # waits on it so no earlier holder's entry becomes durable after the grant.
        self._writes = WriteBarrier()
        self.producers = ProducerRegistry(ledger, self._writes)
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._staged: list[SendRequest] = []
        self._staged_bytes = 0
        # Set when staged bytes reach journalMaxGroupSizeBytes: the group commit starts early.
        self._group_full = asyncio.Event()
        self._rates = RateMeter(self.rate_counters())
        # Producers that lost a message to a failed write; their SENDs are refused until they
        # reconnect as new producer objects (see the module docstring, step 3).
        self._failed_producers: set[Producer] = set()
        self._last_snapshot_wall_time: float | None = None
        self._last_snapshot_check = clock()
        self._last_purge_check = clock()
        # Serialises cursor-file I/O of the housekeeping thread with deleting the dedup cursor,
        # so a periodic persist cannot write back a cursor that disabling dedup just deleted.
        self._cursor_io = asyncio.Lock()
        self._dirty = asyncio.Event()
        self._closed = False
        self._terminated = ledger.properties.get(TERMINATED_PROPERTY, 0) == 1
        self._metadata_cache: OrderedDict[Position, EntryMetadata] = OrderedDict()
        # Entries whose metadata does not parse (item 1 of issue #10): skipped by every reader.
        self._unreadable: set[Position] = set()
        self._limits = DispatchLimits(
            max_read_entries=config.dispatcher_max_read_batch_size,
            max_read_bytes=config.dispatcher_max_read_size_bytes,
            batch_index_ack=config.acknowledgment_at_batch_index_level_enabled,
            delayed_delivery=config.delayed_delivery_enabled,
            delayed_tick_seconds=config.delayed_delivery_tick_time_millis / 1000,
        )
        #: Compaction (issue #14): the compacted view, runs, their status.
        self.compaction = TopicCompaction(self, OsFileLayer())
        #: Backlog bytes that start a compaction by themselves (0: never); set from the
        #: namespace policy or brokerServiceCompactionThresholdInBytes.
        self.compaction_threshold_bytes = config.broker_service_compaction_threshold_in_bytes
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"flush {name.full_name}")
        self._housekeeper = asyncio.create_task(self._housekeeping_loop())
        for cursor in ledger.cursors.values():
            if cursor.name not in (DEDUP_CURSOR, COMPACTION_CURSOR, IDEMPOTENCY_CURSOR):
                self._attach_subscription(cursor.name, cursor, durable=True)

    # ------------------------------------------------------------------ publishing

    @property
    def dedup_enabled(self) -> bool:
        return self.dedup is not None

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
        """Accept one entry (a SEND); the future resolves when it is durable.

        ``submit`` with a future: for callers that await one entry (the connection uses
        ``submit`` directly and is told once per group commit). Resolves to ``None`` for a
        duplicate (receipt ``-1:-1``); raises synchronously as ``submit`` does.
        """
        future: asyncio.Future[Position | None] = self._loop.create_future()
        request = SendRequest(producer, sequence_id, highest_sequence_id, entry, future=future)
        self.submit(request, chunk, num_messages)
        return future

    def submit(self, request: SendRequest, chunk: ChunkInfo | None, num_messages: int) -> None:
        """Accept one SEND: settle it at once (a duplicate) or stage it for the group commit.

        ``chunk`` says where the entry sits in a chunked message (its SEND was validated by
        `SendEntryChecker`); dedup then works chunk by chunk (`MessageDeduplication.check_chunk`).
        ``num_messages`` is the SEND's message count (a batch's size), for the msgIn counters.

        A duplicate is resolved with ``None`` (receipt ``-1:-1``), or with its original's
        position for an idempotency-key duplicate. Raises ``PersistenceError`` synchronously for
        dedup's "unknown" answer (the write of that id is still in flight), and for a producer
        that lost a message to a failed write and has not reconnected; ``ProducerFenced`` and
        ``TopicTerminated`` likewise. Never awaits.
        """
        if self._closed:
            raise PersistenceError("Topic is closing")
        if self._terminated:
            raise TopicTerminated(f"Topic {self.name.full_name} was terminated")
        producer = request.producer
        if not self.producers.may_publish(producer):
            # PIP-68: checked at append time, so a fenced producer never reaches the ledger.
            raise ProducerFenced("Producer was fenced")
        if producer in self._failed_producers:
            raise PersistenceError("An earlier message of this producer failed to persist")
        entry = request.entry
        sequence_id = request.sequence_id
        if chunk is not None and not chunk.is_last:
            request.chunk_id = chunk.chunk_id
        # Issue #16: keys first, so a duplicate is answered with its original's position.
        admission = self._check_idempotency_keys(entry) if chunk is None else None
        if admission is not None and admission.verdict is Verdict.DUPLICATE:
            request.resolve(admission.original)
            return
        dedup = self.dedup
        if dedup is not None:
            if chunk is not None:
                verdict = dedup.check_chunk(
                    producer.name, sequence_id, chunk.chunk_id, chunk.is_last
                )
            else:
                if dedup.may_be_duplicate(producer.name, sequence_id):
                    # The identity's one refinement: the exact last id of a gapped batch.
                    request.highest_sequence_id = exact_batch_highest_sequence_id(
                        entry, request.highest_sequence_id
                    )
                verdict = dedup.check(producer.name, sequence_id, request.highest_sequence_id)
            if verdict is DedupResult.DUP:
                request.resolve(None)
                return
            if verdict is DedupResult.UNKNOWN:
                raise PersistenceError(
                    "Cannot determine whether the message is a duplicate at this time"
                )
        if admission is not None and self.idempotency is not None:
            request.ticket = self.idempotency.admit(admission)
        stats = self.stats
        stats.msg_in += num_messages
        stats.bytes_in += len(entry)
        request.staged_at = time.monotonic()
        self._staged.append(request)
        self._staged_bytes += len(entry)
        if self._staged_bytes >= self.config.journal_max_group_size_bytes:
            self._group_full.set()
        self._writes.accepted()
        self._dirty.set()

    def _check_idempotency_keys(self, entry: bytes) -> Admission | None:
        """The window's `Admission` of an entry with idempotency keys (None without keys).

        Raises ``PersistenceError`` (retriable) while a key of the entry is still being written.
        """
        window = self.idempotency
        if window is None or not window.config.enabled:
            return None
        keys = entry_keys(entry)
        if keys is None:
            return None
        admission = window.check(keys.keys)
        if admission.verdict is Verdict.IN_FLIGHT:
            raise PersistenceError(
                "Cannot determine whether the message is a duplicate at this time "
                "(its idempotency key is still being written)"
            )
        return admission

    def hidden_indexes(self, position: Position) -> int:
        """Batch indexes of ``position`` no subscription or reader may deliver (issue #16)."""
        window = self.idempotency
        return 0 if window is None else window.hidden_indexes(position)

    async def _flush_loop(self) -> None:
        """Group commit: append what is staged, flush it in a thread, complete or fail it."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._wait_for_group()
            if not self._staged:
                if self._closed:
                    return
                continue
            group, self._staged = self._staged, []
            self._staged_bytes = 0
            self._group_full.clear()
            try:
                # One queue: the staged requests are the group; the ledger gets their entries
                # in one call (one lock acquisition), then one write and one fdatasync.
                positions = self.ledger.append_many([write.entry for write in group])
                for write, position in zip(group, positions, strict=True):
                    write.position = position
                await asyncio.to_thread(self.ledger.flush)
            except (OSError, StorageError, ValueError) as exc:
                self._on_flush_failed(group, exc)
            else:
                self.stats.flushes += 1
                self._complete(group)
                self._writes.settled(len(group))
            # Not kept until the next flush: its entries name their producers, and through
            # them their (maybe closed) connections.
            del group
            if self._staged or self._closed:
                # More to write, or close() asked to stop: its wake-up may have been cleared
                # at the top of this turn, and waiting again would hang the unload.
                self._dirty.set()

    async def _wait_for_group(self) -> None:
        """Let more appends join this group commit: until journalMaxGroupWaitMSec has passed
        or journalMaxGroupSizeBytes are staged, whichever comes first (BookKeeper's rules)."""
        wait = self.config.journal_max_group_wait_seconds
        if wait <= 0 or self._closed or self._group_full.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._group_full.wait()

    def _complete(self, group: list[SendRequest]) -> None:
        """Every entry of ``group`` is durable: move the marks, answer, wake the readers.

        The requests are resolved first, then each connection is told once (``on_settled``), so
        the receipts of a whole group leave a connection in one write."""
        dedup = self.dedup
        window = self.idempotency
        durable_at = time.monotonic()
        latency = self.stats.publish_latency_ms
        for write in group:
            position = write.position
            assert position is not None
            latency.observe((durable_at - write.staged_at) * 1000)
            if window is not None:
                window.on_persisted(write.ticket, position)
            if dedup is None:
                pass
            elif write.chunk_id < 0:
                dedup.on_persisted(write.producer.name, write.highest_sequence_id, position)
            else:
                dedup.on_chunk_persisted(
                    write.producer.name, write.highest_sequence_id, write.chunk_id, position
                )
            write.resolve(position)
        for sub in self.subscriptions.values():
            sub.schedule_dispatch()
        _notify_settled(group)
        if dedup is not None and dedup.snapshot_due_by_entries():
            self._take_dedup_snapshot()
        interval = self.config.broker_deduplication_entries_interval
        if window is not None and window.snapshot_due(interval):
            take_idempotency_snapshot(self.ledger, window)

    def _on_flush_failed(self, group: list[SendRequest], exc: BaseException) -> None:
        """A write or fsync failed (module docstring, step 3).

        A group spanning a segment roll is written segment by segment, so its first part may be
        durable when a later part fails. That part is in the log: it is completed like any
        durable entry (failing it would make the client resend it, and store it twice). The
        rest of the group, and everything staged behind it, is failed.
        """
        self.stats.persistence_errors += 1
        log.error("%s: ledger flush failed: %s", self.name.full_name, exc)
        durable = self.ledger.last_confirmed_position
        written = 0
        if durable is not None:
            for write in group:  # positions increase: the durable part is a prefix
                if write.position is None or write.position > durable:
                    break
                written += 1
        if written:
            self._complete(group[:written])
        failed = group[written:] + self._staged
        self._staged = []
        self._staged_bytes = 0
        self._group_full.clear()
        settled = written + len(failed)
        error = PersistenceError(f"Failed to persist entry: {exc}")
        for write in failed:
            self._failed_producers.add(write.producer)
            if self.idempotency is not None:
                self.idempotency.on_write_failed(write.ticket)
            write.fail(error)
        if self.dedup is not None:
            self.dedup.on_write_failed()
        self._writes.settled(settled)
        _notify_settled(failed)

    # ------------------------------------------------------------------ producers

    async def add_producer(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Admit a producer (PIP-68 rules); False = queued as a WaitForExclusive waiter."""
        self._refuse_if_closed()
        if self._terminated:
            raise TopicTerminated(f"Topic {self.name.full_name} was terminated")
        ready = await self.producers.add(producer, requested_epoch)
        if not ready:
            self.producers.producer_queued(producer)
        if self.dedup is not None:
            self.dedup.producer_connected(producer.name)
        return ready

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def terminate(self) -> Position:
        """Pulsar's topic termination: nothing is accepted any more, so the last message stays
        the last; returns its position. Durable (a ledger property) before it returns. SENDs are
        refused from the call on; what was accepted before settles first; then the producers are
        told to go (they reconnect and get TopicTerminatedError)."""
        if not self._terminated:
            self._terminated = True
            await self._writes.wait_for_accepted()
            await run_to_completion(self.ledger.set_property, TERMINATED_PROPERTY, 1)
            for producer in list(self.producers.producers):
                producer.sink.close_producer(producer)
            for sub in self.subscriptions.values():
                sub.schedule_dispatch()  # those at the end learn it now (REACHED_END_OF_TOPIC)
        return self.last_confirmed_position()

    async def remove_producer(self, producer: Producer) -> None:
        self._failed_producers.discard(producer)
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

    # ------------------------------------------------------------------ dedup snapshots

    def _take_dedup_snapshot(self) -> None:
        """Mark-delete the dedup cursor at the last persisted entry, with the persisted marks as
        its properties. In memory here; the housekeeping task (or close) persists the cursor,
        and until then the previous snapshot plus a longer replay rebuilds the same state."""
        dedup = self.dedup
        assert dedup is not None
        position = dedup.last_persisted_position
        if position is None:
            return
        snapshot = dedup.snapshot()
        self.ledger.open_cursor(DEDUP_CURSOR).mark_delete(position, properties=snapshot)
        dedup.on_snapshot_taken(position, self._clock())
        self._last_snapshot_wall_time = time.time()

    def _maybe_snapshot_dedup_by_time(self) -> None:
        """Java's periodic snapshot task, run every brokerDeduplicationSnapshotFrequencyInSeconds
        (0 disables it): snapshot if entries were persisted and the interval has passed."""
        frequency = self.config.broker_deduplication_snapshot_frequency_in_seconds
        if frequency <= 0:
            return
        now = self._clock()
        if now - self._last_snapshot_check < frequency:
            return
        self._last_snapshot_check = now
        if self.dedup is not None and self.dedup.should_snapshot(now):
            self._take_dedup_snapshot()

    def _maybe_purge_inactive_producers(self) -> None:
        now = self._clock()
        if self.dedup is None or now - self._last_purge_check < _PURGE_CHECK_INTERVAL_S:
            return
        self._last_purge_check = now
        timeout = self.config.broker_deduplication_producer_inactivity_timeout_minutes * 60.0
        purged = self.dedup.purge_inactive(now, timeout)
        if purged:
            log.info("%s: forgot %d inactive producer(s)", self.name.full_name, len(purged))

    async def set_dedup_enabled(self, enabled: bool) -> None:
        """Apply a policy change (T2/T3).

        Disabling forgets every mark and deletes the dedup cursor. Enabling starts tracking
        afresh: the cursor is created (and persisted) at the end of the log, so the next load
        replays only what is written from now on, and names seen before are unknown again.
        """
        if enabled and self.dedup is None:
            dedup: MessageDeduplication[Position] = MessageDeduplication(
                dedup_config_from(self.config)
            )
            for producer in self.producers.producers:
                dedup.producer_connected(producer.name)
            async with self._cursor_io:
                if DEDUP_CURSOR in self.ledger.cursors:  # left over; never reuse its snapshot
                    self.ledger.detach_cursor(DEDUP_CURSOR)
                    await run_to_completion(self.ledger.remove_cursor_file, DEDUP_CURSOR)
                # Positioned and tracking from the same loop step, so dedup and the cursor
                # cover the same entries; the file follows from a disk thread (a crash before
                # it leaves no cursor: dedup then restarts afresh, as if never enabled).
                cursor = self.ledger.add_cursor(
                    self.ledger.new_cursor(DEDUP_CURSOR, InitialPosition.LATEST)
                )
                self.dedup = dedup
                self._last_snapshot_wall_time = None
                await run_to_completion(cursor.persist)
        elif not enabled and self.dedup is not None:
            self.dedup.clear()
            self.dedup = None
            self._last_snapshot_wall_time = None
            async with self._cursor_io:
                if DEDUP_CURSOR in self.ledger.cursors:
                    self.ledger.detach_cursor(DEDUP_CURSOR)
                    await run_to_completion(self.ledger.remove_cursor_file, DEDUP_CURSOR)

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
        cached = self._metadata_cache.get(position)
        if cached is not None:
            return cached
        if position in self._unreadable:
            return None
        try:
            meta = parse_entry_metadata(entry)
        except RemoteProtocolError as exc:
            self._note_unreadable(position, exc)
            return None
        self._metadata_cache[position] = meta
        if len(self._metadata_cache) > _METADATA_CACHE_ENTRIES:
            self._metadata_cache.popitem(last=False)
        return meta

    def _note_unreadable(self, position: Position, exc: Exception) -> None:
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
        last = self.ledger.last_confirmed_position
        return last if last is not None else self.ledger.before_first_position()

    async def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """First entry whose publish time is at or after ``timestamp_ms`` (or the end).

        As Java: binary search for the newest entry published before T, then the next one. The
        search reads entries all over the log, so it runs in a disk thread.
        """
        newest_before = await run_blocking(
            self.ledger.find_newest_matching, lambda entry: _published_before(entry, timestamp_ms)
        )
        if newest_before is None:
            return self.first_read_position()
        return self.ledger.next_position(newest_before)

    # ------------------------------------------------------------------ ids and positions

    def first_read_position(self) -> Position:
        return self.ledger.next_position(self.ledger.before_first_position())

    def reader_start(self, start: MessageId) -> Position:
        """First read position of a reader starting at ``start``: inclusive (the client filters
        the start message itself when it asked for exclusive). Latest = after the last entry,
        so the mark-delete is the last entry, as hasMessageAvailable needs."""
        return self.seek_target(start)

    def seek_target(self, target: MessageId) -> Position:
        """Next read position for SEEK by message id (inclusive)."""
        if target.ledger_id < 0 or target.entry_id < 0:
            return self.first_read_position()
        if target.ledger_id >= I64_MAX or target.entry_id >= I64_MAX:
            return self.ledger.next_position(self.last_confirmed_position())
        return Position(target.ledger_id, target.entry_id)

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
            begin = start if start is not None else self.first_read_position()
            cursor = self.ledger.new_non_durable_cursor(begin)
            return self._attach_subscription(name, cursor, durable=False)
        async with self._cursor_io:
            existing = self.subscriptions.get(name)
            if existing is not None:
                return existing
            found = self.ledger.cursors.get(name)
            if found is None:
                initial = InitialPosition.EARLIEST if initial_earliest else InitialPosition.LATEST
                fresh = self.ledger.new_cursor(name, initial)
                await run_to_completion(fresh.persist)
                found = self.ledger.add_cursor(fresh)
            self._refuse_if_closed()  # closed during the write: close() saw no such subscription
            return self._attach_subscription(name, found, durable=True)

    @property
    def closed(self) -> bool:
        """Closed or closing (unload, delete, shutdown): nothing new may attach to it."""
        return self._closed

    @property
    def cursor_io(self) -> asyncio.Lock:
        """Held around cursor-file I/O (compaction persists the ``__compaction`` cursor)."""
        return self._cursor_io

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
            async with self._cursor_io:
                await run_to_completion(self.ledger.remove_cursor_file, name)

    # ------------------------------------------------------------------ housekeeping

    async def _housekeeping_loop(self) -> None:
        """Cursor persistence, time-based dedup snapshots, inactive-producer purge, trimming."""
        tick = max(0.05, min(1.0, self.config.managed_ledger_cursor_persist_interval_ms / 1000))
        frequency = self.config.broker_deduplication_snapshot_frequency_in_seconds
        if frequency > 0:
            tick = min(tick, float(frequency))
        while not self._closed:
            await asyncio.sleep(tick)
            try:
                self._rates.sample(self.rate_counters())
                self._maybe_snapshot_dedup_by_time()
                self._maybe_purge_inactive_producers()
                self.compaction.maybe_trigger(self.compaction_threshold_bytes)
                async with self._cursor_io:
                    await run_to_completion(self._persist_cursors, time.monotonic())
                await run_to_completion(self.ledger.trim)
            except Exception:
                log.exception("%s: housekeeping failed", self.name.full_name)

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
        self._dirty.set()
        self._group_full.set()  # no point waiting for more: nothing new will be accepted
        with contextlib.suppress(Exception):
            await self._flusher
        self._housekeeper.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._housekeeper
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
        async with self._cursor_io:
            try:
                await run_blocking(self._persist_dirty_cursors)
            except (OSError, StorageError) as exc:
                log.warning("%s: persisting cursors before close: %s", self.name.full_name, exc)
        for sub in self.subscriptions.values():
            sub.close()
        dedup = self.dedup
        if dedup is not None and dedup.entries_since_snapshot > 0:
            # A clean unload leaves nothing to replay on the next load.
            with contextlib.suppress(Exception):
                self._take_dedup_snapshot()
        if self.idempotency is not None and self.idempotency.entries_since_snapshot > 0:
            with contextlib.suppress(Exception):
                take_idempotency_snapshot(self.ledger, self.idempotency)  # ledger.close persists
        async with self._cursor_io:
            await run_blocking(self.ledger.close)

    async def abandon(self) -> None:
        """Test hook: stop as if the process died (kill -9). Nothing is flushed, snapshotted or
        persisted; a flush already running in its thread completes, as it would on disk, but
        nobody is answered. Reopen the directory to recover."""
        self._closed = True
        self.compaction.abandon()
        for task in (self._flusher, self._housekeeper):
            task.cancel()
        await asyncio.gather(self._flusher, self._housekeeper, return_exceptions=True)
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

    def stats_snapshot(self) -> dict[str, Any]:
        last = self.last_confirmed_position()
        counters = self.rate_counters()
        rate_in, throughput_in, rate_out, throughput_out = self.rates()
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": throughput_in,
            "msgRateOut": rate_out,
            "msgThroughputOut": throughput_out,
            "msgInCounter": self.stats.msg_in,
            "bytesInCounter": self.stats.bytes_in,
            "msgOutCounter": counters[2],
            "bytesOutCounter": counters[3],
            "storageSize": self.ledger.stats()["stored_bytes"],
            "publishers": sum(1 for p in self.producers.producers if p.ready),
            "producerAccess": self.producers.stats(),
            "lastConfirmedEntry": f"{last[0]}:{last[1]}",
            "unreadableEntries": self.stats.unreadable_entries,
            "subscriptions": {n: s.describe() for n, s in self.subscriptions.items()},
            "deduplication": self.dedup_stats(),
            "compaction": self.compaction.stats_json(),
            "idempotency": None if self.idempotency is None else self.idempotency.stats(),
        }

    def dedup_stats(self) -> dict[str, Any]:
        """The ``deduplication`` section of the topic stats (JSON-ready, camelCase keys)."""
        if self.dedup is None:
            return {"enabled": False}
        raw = self.dedup.stats()
        snapshot_position = raw["last_snapshot_position"]
        persisted_position = raw["last_persisted_position"]
        return {
            "enabled": True,
            "state": raw["state"],
            "trackedProducers": raw["tracked_producers"],
            "connectedProducers": raw["connected_producers"],
            "inactiveProducers": raw["inactive_producers"],
            "accepted": raw["accepted"],
            "duplicatesDropped": raw["duplicates_dropped"],
            "unknownAnswers": raw["unknown_answers"],
            "straddlingBatchesStored": raw["straddling_batches"],
            "writeFailures": raw["write_failures"],
            "purgedProducers": raw["purged_producers"],
            "replayedEntries": raw["replayed_entries"],
            "unreadableEntriesSkipped": raw["unreadable_entries_skipped"],
            "chunkedMessagesInFlight": raw["chunked_messages_in_flight"],
            "recoverySeconds": raw["recovery_seconds"],
            "entriesSinceSnapshot": raw["entries_since_snapshot"],
            "lastPersistedPosition": _position_text(persisted_position),
            "lastSnapshotPosition": _position_text(snapshot_position),
            # Wall-clock seconds since the epoch of the last snapshot taken by this load.
            "lastSnapshotTime": self._last_snapshot_wall_time,
        }


def _notify_settled(requests: list[SendRequest]) -> None:
    """Call each distinct ``on_settled`` of ``requests`` once (after all of them are settled).

    A group holds runs of one connection's requests, so comparing with the previous callback
    skips most set operations."""
    previous: object = None
    notified: set[Callable[[], None]] = set()
    for request in requests:
        callback = request.on_settled
        if callback is None or callback is previous:
            continue
        previous = callback
        if callback not in notified:
            notified.add(callback)
            callback()


def _published_before(entry: bytes, timestamp_ms: int) -> bool:
    """Seek-by-time predicate. An unreadable entry counts as not published before the target:
    the binary search may then stop early and redeliver a few earlier messages, never skip a
    later one; the entry itself is skipped on delivery."""
    try:
        return parse_entry_metadata(entry).publish_time < timestamp_ms
    except RemoteProtocolError:
        return False


def _position_text(position: object) -> str | None:
    """``"ledger:entry"`` as Pulsar prints positions, None when there is none."""
    if isinstance(position, Position):
        return f"{position.ledger_id}:{position.entry_id}"
    return None
