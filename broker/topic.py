"""A persistent topic: the single writer of its ledger, its producers and its subscriptions.

Publishing (the hot path, see docs/CONTRACTS.md and aesthetics §3 "SEND"):

1. ``publish`` runs the PIP-68 data-path check (a fenced producer never reaches the ledger), then
   the PIP-6 dedup check, then appends the entry verbatim (``Ledger.append``, buffered) and returns
   a future. It never awaits, so a connection keeps reading pipelined SENDs.
2. The group-commit task (``_flush_loop``) runs ``Ledger.flush`` in a worker thread: one write and
   one fdatasync cover everything appended meanwhile. When it returns, the futures of every entry
   at or below the durable position resolve **in append order**, dedup's persisted marks move, and
   subscriptions are told that new entries may be dispatched (only durable entries are read).
3. A failed flush fails every entry not yet durable (the ledger drops them), and dedup resets
   ``pushed := persisted`` for all producers (Pulsar #5218), so client retries are stored, not
   taken for duplicates.

Thread-safety: everything here runs on the event loop, except the ledger flush (worker thread) and
the load/recovery step (worker thread, before the topic is visible to anybody).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from broker.config import BrokerConfig
from broker.dedup import DedupConfig, DedupResult, MessageDeduplication, batch_highest_sequence_id
from broker.errors import PersistenceError, ProducerFenced
from broker.producer import Producer, ProducerRegistry
from broker.storage import Cursor, InitialPosition, Ledger, LedgerConfig, Position
from broker.subscription import DispatchLimits, Subscription
from protocol.ids import I64_MAX, MessageId
from protocol.metadata import EntryMetadata, parse_entry_metadata
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)

DEDUP_CURSOR = "pulsar.dedup"
_METADATA_CACHE_ENTRIES = 4096


@dataclass(eq=False)
class PublishResult:
    """What a SEND becomes: a durable position, or ``None`` for a PIP-6 duplicate."""

    position: Position | None


@dataclass(eq=False)
class _Unflushed:
    position: Position
    future: asyncio.Future[Position | None]
    producer_name: str
    highest_sequence_id: int


@dataclass
class TopicStats:
    msg_in: int = 0
    bytes_in: int = 0
    duplicates: int = 0
    unknown_dups: int = 0
    persistence_errors: int = 0
    flushes: int = 0
    last_snapshot_time: float | None = None
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


def dedup_config_from(config: BrokerConfig) -> DedupConfig:
    return DedupConfig(
        entries_interval=config.broker_deduplication_entries_interval,
        snapshot_interval_s=float(config.broker_deduplication_snapshot_interval_seconds),
        max_number_of_producers=config.broker_deduplication_max_number_of_producers,
    )


def recover_dedup(ledger: Ledger, config: DedupConfig) -> MessageDeduplication[Position]:
    """PIP-6 recovery: the snapshot on the ``pulsar.dedup`` cursor, then replay every entry after.

    Runs exactly once per topic load, in the loader thread, before any producer is admitted
    (Pulsar #25954). Only producer name and sequence ids are parsed from each entry.
    """
    cursor = ledger.open_cursor(DEDUP_CURSOR, InitialPosition.EARLIEST)
    snapshot_position = cursor.mark_delete_position
    dedup: MessageDeduplication[Position] = MessageDeduplication.begin_recovery(
        dict(cursor.properties), config=config, snapshot_position=snapshot_position
    )
    records: list[tuple[str, int, int]] = []
    for _position, entry in ledger.iter_entries(ledger.next_position(snapshot_position)):
        meta = parse_entry_metadata(entry)
        high = batch_highest_sequence_id(
            meta.sequence_id, meta.highest_sequence_id, meta.num_messages
        )
        records.append((meta.producer_name, meta.sequence_id, high))
        if len(records) >= 1000:
            dedup.replay(records)
            records = []
    dedup.replay(records)
    dedup.finish_recovery(now=time.monotonic(), last_position=ledger.last_confirmed_position)
    return dedup


class Topic:
    """One persistent topic (non-partitioned, or one partition of a partitioned topic)."""

    def __init__(
        self,
        name: TopicName,
        ledger: Ledger,
        config: BrokerConfig,
        *,
        dedup: MessageDeduplication[Position] | None,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.config = config
        self.dedup = dedup
        self.stats = TopicStats()
        self.subscriptions: dict[str, Subscription] = {}
        self.producers = ProducerRegistry(ledger)
        self._loop = asyncio.get_running_loop()
        self._unflushed: list[_Unflushed] = []
        self._dirty = asyncio.Event()
        self._closed = False
        self._metadata_cache: OrderedDict[Position, EntryMetadata] = OrderedDict()
        self._limits = DispatchLimits(
            max_read_entries=config.dispatcher_max_read_batch_size,
            max_read_bytes=config.dispatcher_max_read_size_bytes,
            batch_index_ack=config.acknowledgment_at_batch_index_level_enabled,
            delayed_delivery=config.delayed_delivery_enabled,
            delayed_tick_seconds=config.delayed_delivery_tick_time_millis / 1000,
        )
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"flush {name.full_name}")
        self._housekeeper = asyncio.create_task(self._housekeeping_loop())
        for cursor in ledger.cursors.values():
            if cursor.name != DEDUP_CURSOR:
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
    ) -> asyncio.Future[Position | None]:
        """Append one entry (a SEND); the future resolves when it is durable.

        Resolves to ``None`` for a duplicate (receipt ``-1:-1``). Raises ``PersistenceError``
        synchronously for dedup's "unknown" answer (the write of that id is still in flight).
        """
        if self._closed:
            raise PersistenceError("Topic is closing")
        if not self.producers.may_publish(producer):
            # PIP-68: checked at append time, so a fenced producer never reaches the ledger.
            raise ProducerFenced("Producer was fenced")
        producer_name = producer.name
        future: asyncio.Future[Position | None] = self._loop.create_future()
        if self.dedup is not None:
            verdict = self.dedup.check(producer_name, sequence_id, highest_sequence_id)
            if verdict is DedupResult.DUP:
                self.stats.duplicates += 1
                future.set_result(None)
                return future
            if verdict is DedupResult.UNKNOWN:
                self.stats.unknown_dups += 1
                raise PersistenceError(
                    "Cannot determine whether the message is a duplicate at this time"
                )
        position = self.ledger.append(entry)
        self.stats.msg_in += 1
        self.stats.bytes_in += len(entry)
        self._unflushed.append(_Unflushed(position, future, producer_name, highest_sequence_id))
        self._dirty.set()
        return future

    async def _flush_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            wait = self.config.journal_max_group_wait_seconds
            if wait > 0 and not self._closed:
                # Let more appends join this group commit (BookKeeper journalMaxGroupWaitMSec).
                await asyncio.sleep(wait)
            if not self._unflushed:
                if self._closed:
                    return
                continue
            try:
                durable = await asyncio.to_thread(self.ledger.flush)
            except OSError as exc:
                self._fail_unflushed(exc)
                continue
            self.stats.flushes += 1
            self._complete_up_to(durable)
            if self._unflushed:
                self._dirty.set()

    def _complete_up_to(self, durable: Position | None) -> None:
        if durable is None:
            return
        done = 0
        for item in self._unflushed:
            if item.position > durable:
                break
            done += 1
            if self.dedup is not None:
                self.dedup.on_persisted(item.producer_name, item.highest_sequence_id, item.position)
            if not item.future.done():
                item.future.set_result(item.position)
        del self._unflushed[:done]
        if done:
            for sub in self.subscriptions.values():
                sub.schedule_dispatch()
            self._maybe_snapshot_dedup()

    def _fail_unflushed(self, exc: OSError) -> None:
        """A write or fsync failed: nothing pending is durable, the ledger dropped it."""
        self.stats.persistence_errors += 1
        log.error("%s: ledger flush failed: %s", self.name.full_name, exc)
        failed, self._unflushed = self._unflushed, []
        for item in failed:
            if not item.future.done():
                item.future.set_exception(PersistenceError(f"Failed to persist entry: {exc}"))
        if self.dedup is not None:
            self.dedup.on_write_failed()

    # ------------------------------------------------------------------ producers

    async def add_producer(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Admit a producer (PIP-68 rules); False = queued as a WaitForExclusive waiter."""
        ready = await self.producers.add(producer, requested_epoch)
        if not ready:
            self.producers.producer_queued(producer)
        if self.dedup is not None:
            self.dedup.producer_connected(producer.name)
        return ready

    async def remove_producer(self, producer: Producer) -> None:
        if producer not in self.producers.producers and not self.producers.access.is_waiting(
            producer
        ):
            return
        await self.producers.remove(producer)
        if self.dedup is not None:
            self.dedup.producer_disconnected(producer.name, time.monotonic())

    def last_sequence_id(self, producer_name: str) -> int:
        """PRODUCER_SUCCESS.last_sequence_id: -1 without dedup or history (as Java)."""
        if self.dedup is None:
            return -1
        return self.dedup.last_sequence_id(producer_name)

    # ------------------------------------------------------------------ dedup snapshots

    def _maybe_snapshot_dedup(self) -> None:
        dedup = self.dedup
        if dedup is None or not dedup.should_snapshot(time.monotonic()):
            return
        position = dedup.last_persisted_position
        if position is None:
            return
        snapshot = dedup.snapshot()
        cursor = self.ledger.open_cursor(DEDUP_CURSOR)
        cursor.mark_delete(position, properties=snapshot)
        dedup.on_snapshot_taken(position, time.monotonic())
        self.stats.last_snapshot_time = time.time()

    def set_dedup_enabled(self, enabled: bool) -> None:
        """Apply a policy change: disabling clears the state and deletes the dedup cursor."""
        if enabled and self.dedup is None:
            dedup: MessageDeduplication[Position] = MessageDeduplication(
                dedup_config_from(self.config)
            )
            self.dedup = dedup
            # Tracking starts afresh from here: nothing before now is replayed on the next load.
            cursor = self.ledger.open_cursor(DEDUP_CURSOR, InitialPosition.LATEST)
            cursor.mark_delete(self.last_confirmed_position(), properties={})
            cursor.persist()
        elif not enabled and self.dedup is not None:
            self.dedup.clear()
            self.dedup = None
            if DEDUP_CURSOR in self.ledger.cursors:
                self.ledger.delete_cursor(DEDUP_CURSOR)

    # ------------------------------------------------------------------ reads

    def read_entries(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]]:
        return self.ledger.read(position, max_entries, max_bytes)

    def read_entry(self, position: Position) -> bytes | None:
        found = self.ledger.read(position, 1, 1 << 62)
        if found and found[0][0] == position:
            return found[0][1]
        return None

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata:
        cached = self._metadata_cache.get(position)
        if cached is not None:
            return cached
        meta = parse_entry_metadata(entry)
        self._metadata_cache[position] = meta
        if len(self._metadata_cache) > _METADATA_CACHE_ENTRIES:
            self._metadata_cache.popitem(last=False)
        return meta

    def next_position(self, position: Position) -> Position:
        return self.ledger.next_position(position)

    def last_confirmed_position(self) -> Position:
        """The last durable entry, or "before the first" for a topic that has none."""
        last = self.ledger.last_confirmed_position
        return last if last is not None else self.ledger.before_first_position()

    def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """First entry whose publish time is at or after ``timestamp_ms`` (or the end).

        As Java: binary search for the newest entry published before T, then the next one.
        """
        newest_before = self.ledger.find_newest_matching(
            lambda entry: parse_entry_metadata(entry).publish_time < timestamp_ms
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

    def last_message_id(self, sub: Subscription) -> tuple[MessageId, MessageId | None]:
        """GET_LAST_MESSAGE_ID: the last entry (with its batch index) and the mark-delete."""
        last = self.last_confirmed_position()
        mark = sub.cursor.mark_delete_position
        mark_id = MessageId(mark.ledger_id, mark.entry_id) if mark.ledger_id >= 0 else None
        entry = self.read_entry(last) if last.entry_id >= 0 else None
        if entry is None:
            return MessageId(-1, -1), mark_id
        meta = self.entry_metadata(last, entry)
        batch_index = meta.num_messages - 1 if meta.is_batch else -1
        return MessageId(last.ledger_id, last.entry_id, batch_index=batch_index), mark_id

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

    def get_or_create_subscription(
        self, name: str, *, durable: bool, start: Position | None, initial_earliest: bool
    ) -> Subscription:
        """Find a subscription or create it at its initial position.

        Durable: Latest = mark-delete at the last entry, Earliest = before the first entry; an
        existing subscription keeps its position. Non-durable (readers): start is inclusive.
        """
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        if durable:
            initial = InitialPosition.EARLIEST if initial_earliest else InitialPosition.LATEST
            cursor = self.ledger.open_cursor(name, initial)
        else:
            begin = start if start is not None else self.first_read_position()
            cursor = self.ledger.new_non_durable_cursor(begin)
        return self._attach_subscription(name, cursor, durable=durable)

    def delete_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is None:
            return
        sub.close()
        if sub.durable:
            self.ledger.delete_cursor(name)

    # ------------------------------------------------------------------ housekeeping

    async def _housekeeping_loop(self) -> None:
        """Cursor persistence, time-based dedup snapshots, inactive-producer purge, trimming."""
        frequency = max(
            0.05, min(1.0, self.config.managed_ledger_cursor_persist_interval_ms / 1000)
        )
        while not self._closed:
            await asyncio.sleep(frequency)
            try:
                await asyncio.to_thread(self._persist_cursors, time.monotonic())
                self._maybe_snapshot_dedup()
                if self.dedup is not None:
                    timeout = self.config.broker_deduplication_producer_inactivity_timeout_minutes
                    self.dedup.purge_inactive(time.monotonic(), timeout * 60.0)
                await asyncio.to_thread(self.ledger.trim)
            except Exception:
                log.exception("%s: housekeeping failed", self.name.full_name)

    def _persist_cursors(self, now: float) -> None:
        for cursor in list(self.ledger.cursors.values()):
            cursor.maybe_persist(now)

    async def close(self) -> None:
        """Flush what is pending, persist cursors and close the ledger (graceful unload)."""
        if self._closed:
            return
        self._closed = True
        self._dirty.set()
        with contextlib.suppress(Exception):
            await self._flusher
        self._housekeeper.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._housekeeper
        for sub in self.subscriptions.values():
            sub.close()
        if self.dedup is not None and self.dedup.last_persisted_position is not None:
            with contextlib.suppress(Exception):
                self._maybe_snapshot_dedup_forced()
        await asyncio.to_thread(self.ledger.close)

    def _maybe_snapshot_dedup_forced(self) -> None:
        dedup = self.dedup
        if dedup is None or dedup.entries_since_snapshot == 0:
            return
        position = dedup.last_persisted_position
        if position is None:
            return
        cursor = self.ledger.open_cursor(DEDUP_CURSOR)
        cursor.mark_delete(position, properties=dedup.snapshot())
        dedup.on_snapshot_taken(position, time.monotonic())

    def stats_snapshot(self) -> dict[str, Any]:
        last = self.last_confirmed_position()
        return {
            "msgInCounter": self.stats.msg_in,
            "bytesInCounter": self.stats.bytes_in,
            "publishers": len(self.producers.producers),
            "producerAccess": self.producers.stats(),
            "lastConfirmedEntry": f"{last[0]}:{last[1]}",
            "subscriptions": {n: s.describe() for n, s in self.subscriptions.items()},
            "deduplication": self._dedup_stats(),
        }

    def _dedup_stats(self) -> dict[str, Any]:
        if self.dedup is None:
            return {"enabled": False}
        stats = dict(self.dedup.stats())
        stats.update(
            enabled=True,
            duplicatesDropped=self.stats.duplicates,
            unknownAnswers=self.stats.unknown_dups,
            lastSnapshotTime=self.stats.last_snapshot_time,
        )
        return stats
