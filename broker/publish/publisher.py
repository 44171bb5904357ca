"""``Publisher``: one topic's publish path, from an accepted SEND to its durable entry.

The hot path (see docs/ARCHITECTURE.md "SEND", docs/CONTRACTS.md):

1. ``submit`` (a connection's SEND; ``Topic.publish`` wraps it in a future) runs the PIP-68
   data-path check (a fenced producer never reaches the ledger), the idempotency-key check
   (issue #16), then the PIP-6 dedup check, then *stages* a ``Publication``: the staged list is
   the group commit's one queue. It never awaits, so a connection keeps reading pipelined SENDs,
   and it returns the outcome the connection turns into a receipt.
2. The group-commit task (``_flush_loop``) hands everything staged to the ledger
   (``Ledger.append_many``, buffered) and runs ``Ledger.flush`` in a worker thread: one write and
   one fdatasync cover the whole group. Entries published meanwhile stay staged for the next
   group. When the flush returns, the publications of the group resolve **in append order**,
   ``SETTLE_PER_TURN`` per turn of the loop: dedup's persisted marks move, the topic's readers
   are woken (only durable entries are read), each connection is told once per slice (so it
   writes a slice's receipts in one write), and a dedup snapshot is taken every
   ``brokerDeduplicationEntriesInterval`` entries.
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

The PIP-6 state lives here too: its snapshots on the ``pulsar.dedup`` cursor (by entry count
after a group, by time from the topic's housekeeping), the purge of inactive producers, and
turning dedup on or off by policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.blocking import run_to_completion
from broker.config import BrokerConfig
from broker.errors import (
    InvalidMessageMetadata,
    PersistenceError,
    ProducerFenced,
    TopicTerminated,
)
from broker.publish.dedup import DedupResult, MessageDeduplication
from broker.publish.dedup_snapshot import (
    DEDUP_CURSOR,
    dedup_config_from,
    exact_batch_highest_sequence_id,
)
from broker.publish.idempotency_keys import (
    MAX_KEYED_HEADER_BYTES,
    MAX_KEYED_PROPERTIES,
    KeyInFlight,
    KeyScanRefused,
    admit_entry,
)
from broker.publish.idempotency_snapshot import take_snapshot as take_idempotency_snapshot
from broker.publish.idempotency_window import IdempotencyWindow, Ticket
from broker.publish.producers import Producer, ProducerRegistry
from broker.publish.publication import (
    DUPLICATE,
    Publication,
    PublishOutcome,
    Settled,
    notify_settled,
)
from broker.publish.settle import (
    group_entries,
    move_dedup_marks,
    place_group,
    settle_durable,
)
from broker.publish.write_barrier import WriteBarrier
from broker.storage import Ledger, Position, StorageError
from broker.topics.stats import TopicStats
from protocol.enums import InitialPosition
from protocol.metadata import ChunkInfo
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)

# Inactive producers are looked for at most this often; the timeout itself is in minutes.
_PURGE_CHECK_INTERVAL_S = 60.0
#: Durable publications settled per turn of the loop (~1 ms of work; issue #24).
SETTLE_PER_TURN = 512
#: Shared by every publisher until one of its writes fails: most topics never see one.
_NO_FAILED_PRODUCERS: frozenset[Producer] = frozenset()
_NOT_DUP = DedupResult.NOT_DUP


_KEY_IN_FLIGHT = (
    "Cannot determine whether the message is a duplicate at this time "
    "(its idempotency key is still being written)"
)


def _key_answer(original: Position | None) -> Settled:
    """`IdempotencyWindow.reserve_one`'s refusals: a duplicate of ``original``, or (None) a
    key still being written, a retriable error as PIP-6's "unknown"."""
    if original is None:
        raise PersistenceError(_KEY_IN_FLIGHT)
    return Settled(original)


def _admit_keys(window: IdempotencyWindow, entry: bytes) -> Ticket | int | Settled | None:
    """`admit_entry` of a batch or compressed entry, with its refusals as the SEND's errors."""
    try:
        return admit_entry(window, entry, None)
    except KeyScanRefused as exc:
        # Bounded work per SEND (issue #24): refused in its turn, nothing stored; the code
        # makes the official clients fail just this message (`InvalidMessageMetadata`).
        raise InvalidMessageMetadata(str(exc)) from None
    except KeyInFlight:
        raise PersistenceError(_KEY_IN_FLIGHT) from None


class _GroupCommit:
    """The group-commit task and the two events it waits on.

    Made by the first SEND, not with the publisher: a loaded topic that nobody publishes to
    (100,000 idle topics, issue #26) would otherwise hold a task, its coroutine frame and two
    events (each with a deque) for nothing, ~3 KiB a topic.
    """

    __slots__ = ("dirty", "group_full", "task")

    def __init__(self) -> None:
        #: Set when something is staged (or close() wants the loop to end).
        self.dirty = asyncio.Event()
        #: Set when staged bytes reach journalMaxGroupSizeBytes: the group commit starts early.
        self.group_full = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class Publisher:
    """The publish path of one topic: admission, group commit, and the PIP-6 state."""

    def __init__(
        self,
        name: TopicName,
        ledger: Ledger,
        config: BrokerConfig,
        *,
        stats: TopicStats,
        producers: ProducerRegistry,
        writes: WriteBarrier,
        dedup: MessageDeduplication[Position] | None,
        wake_readers: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        """``wake_readers`` is called after each durable group (subscriptions may dispatch);
        ``clock`` is the monotonic clock of dedup's timers (tests substitute a fake one)."""
        self._name = name
        self._ledger = ledger
        self._config = config
        self._stats = stats
        self._producers = producers
        # Accepted writes (staged or in a flush group) until durable or failed: a PIP-68 grant
        # waits on it so no earlier holder's entry becomes durable after the grant.
        self._writes = writes
        # The topic's lock around cursor-file I/O (`cursor_io`), made on first use.
        self._cursor_io: asyncio.Lock | None = None
        self._wake_readers = wake_readers
        self._clock = clock
        self.dedup = dedup
        #: The idempotency-key window (issue #16): set by the loader right after construction
        #: (`recover_window`), before anything can publish; None: keys are not checked.
        self.idempotency: IdempotencyWindow | None = None
        self.terminated = False
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._staged: list[Publication] = []
        self._staged_bytes = 0
        # The group commit, started by the first accepted SEND (see `_GroupCommit`).
        self._commit: _GroupCommit | None = None
        # Producers that lost a message to a failed write; their SENDs are refused until they
        # reconnect as new producer objects (see the module docstring, step 3). A set from the
        # first failure on.
        self._failed_producers: set[Producer] | frozenset[Producer] = _NO_FAILED_PRODUCERS
        self.last_snapshot_wall_time: float | None = None
        self._last_snapshot_check = clock()
        self._last_purge_check = clock()

    # ------------------------------------------------------------------ admission

    def submit(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        entry: bytes,
        chunk: ChunkInfo | None,
        num_messages: int,
        on_settled: Callable[[], None] | None,
        future: asyncio.Future[Position | None] | None = None,
        entry_crc: int = -1,
    ) -> PublishOutcome:
        """Accept one SEND: answer it at once (a duplicate) or stage it for the group commit.

        ``chunk`` says where the entry sits in a chunked message (its SEND was validated by
        `SendEntryChecker`); dedup then works chunk by chunk (`MessageDeduplication.check_chunk`).
        ``num_messages`` is the SEND's message count (a batch's size), for the msgIn counters.
        ``on_settled`` is called once per group commit that settles publications carrying it.
        ``entry_crc``: the entry's CRC-32C when the decoder verified the SEND's checksum
        (``Frame.entry_crc``), else -1; the ledger reuses it for the record's CRC.

        A duplicate is answered with ``DUPLICATE`` (receipt ``-1:-1``), or with its original's
        position for an idempotency-key duplicate. Raises ``PersistenceError`` synchronously for
        dedup's "unknown" answer (the write of that id is still in flight), and for a producer
        that lost a message to a failed write and has not reconnected; ``ProducerFenced`` and
        ``TopicTerminated`` likewise. Never awaits.
        """
        if self._closed:
            raise PersistenceError("Topic is closing")
        if self.terminated:
            raise TopicTerminated(f"Topic {self._name.full_name} was terminated")
        if producer.fenced or not self._producers.access.may_publish(producer):
            # PIP-68: checked at append time, so a fenced producer never reaches the ledger
            # (`ProducerRegistry.may_publish`, inline: one call less per SEND).
            raise ProducerFenced("Producer was fenced")
        if producer in self._failed_producers:
            raise PersistenceError("An earlier message of this producer failed to persist")
        # Issue #16: keys first, so a duplicate is answered with its original's position. The
        # keyless case (nearly every entry) and a single message's key each cost one compiled
        # call (the window's `KeyGate.reserve_entry`: scan, digest, clock and table).
        ticket: Ticket | int | None = None
        window = self.idempotency
        if window is not None and window.checking and chunk is None:
            quick = window.reserve_entry(entry, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
            if type(quick) is int:  # one message, one key: its slot, or the live one's
                if quick < 0:  # a duplicate, or a key still being written
                    return _key_answer(window.found_answer(quick))
                ticket = quick
            elif quick is not False:
                keys = _admit_keys(window, entry)
                if isinstance(keys, Settled):
                    return keys
                ticket = keys
        dedup = self.dedup
        if dedup is not None:
            name = producer.name
            verdict: DedupResult | None
            if chunk is not None:
                verdict = dedup.check_chunk(name, sequence_id, chunk.chunk_id, chunk.is_last)
            else:
                verdict = dedup.check_above_pushed(name, sequence_id, highest_sequence_id)
                if verdict is None:  # at or below the pushed mark: dedup's rare path
                    # The identity's one refinement: the exact last id of a gapped batch.
                    highest_sequence_id = exact_batch_highest_sequence_id(
                        entry, highest_sequence_id
                    )
                    verdict = dedup.check(name, sequence_id, highest_sequence_id)
            if verdict is not _NOT_DUP:
                if ticket is not None and window is not None:
                    window.on_write_failed(ticket)  # admitted above: released, not stored
                if verdict is DedupResult.DUP:
                    return DUPLICATE
                raise PersistenceError(
                    "Cannot determine whether the message is a duplicate at this time"
                )
        chunk_id = chunk.chunk_id if chunk is not None and not chunk.is_last else -1
        publication = Publication(
            producer,
            highest_sequence_id,
            entry,
            chunk_id,
            time.monotonic(),
            on_settled,
            future,
            entry_crc,
        )
        publication.ticket = ticket
        size = len(entry)
        stats = self._stats
        stats.msg_in += num_messages
        stats.bytes_in += size
        commit = self._commit or self._start_group_commit()
        staged = self._staged
        staged.append(publication)
        self._staged_bytes += size
        if self._staged_bytes >= self._config.journal_max_group_size_bytes:
            commit.group_full.set()
        self._writes.accepted()
        if len(staged) == 1:
            # The first of a group wakes the group commit; the ones behind it need not: the
            # flusher takes everything staged when it takes a group (after its wait), and sets
            # the event again itself if more was staged while it wrote (`_flush_loop`).
            commit.dirty.set()
        return publication

    def _start_group_commit(self) -> _GroupCommit:
        commit = self._commit = _GroupCommit()
        commit.task = self._loop.create_task(
            self._flush_loop(commit), name=f"flush {self._name.full_name}"
        )
        return commit

    def producer_reconnected(self, producer: Producer) -> None:
        """``producer`` left: a new producer object of the same name may publish again."""
        failed = self._failed_producers
        if isinstance(failed, set):
            failed.discard(producer)

    # ------------------------------------------------------------------ group commit

    async def _flush_loop(self, commit: _GroupCommit) -> None:
        """Group commit: append what is staged, flush it in a thread, complete or fail it."""
        while True:
            await commit.dirty.wait()
            commit.dirty.clear()
            await self._wait_for_group(commit.group_full)
            if not self._staged:
                if self._closed:
                    return
                continue
            group, self._staged = self._staged, []
            self._staged_bytes = 0
            commit.group_full.clear()
            try:
                # One queue: the staged publications are the group; the ledger gets their
                # entries in one call (one lock acquisition), then one write and one fdatasync.
                entries, crcs = group_entries(group)
                place_group(group, self._ledger.append_many(entries, crcs))
                await asyncio.to_thread(self._ledger.flush)
            except (OSError, StorageError, ValueError) as exc:
                self._on_flush_failed(group, exc)
            else:
                self._stats.flushes += 1
                await self._complete_in_turns(group)
            # Not kept until the next flush: its entries name their producers, and through
            # them their (maybe closed) connections.
            del group
            if self._staged or self._closed:
                # More to write, or close() asked to stop: its wake-up may have been cleared
                # at the top of this turn, and waiting again would hang the unload.
                commit.dirty.set()

    async def _wait_for_group(self, group_full: asyncio.Event) -> None:
        """Let more appends join this group commit: until journalMaxGroupWaitMSec has passed
        or journalMaxGroupSizeBytes are staged, whichever comes first (BookKeeper's rules)."""
        wait = self._config.journal_max_group_wait_seconds
        if wait <= 0 or self._closed or group_full.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await group_full.wait()

    async def _complete_in_turns(self, group: list[Publication]) -> None:
        """Complete a durable group ``SETTLE_PER_TURN`` publications per turn of the loop.

        Settling costs ~2 us per entry (marks, futures, receipts): a group of 4000 chunks
        would hold the loop ~9 ms in one turn (issue #24). Slices go in append order, so
        each producer's receipts still leave in SEND order. Nothing new joins this group
        meanwhile (new SENDs are staged for the next one), and close() waits for the flusher,
        so every slice is completed; only abandon() (the process "dies") may cut it short."""
        for start in range(0, len(group), SETTLE_PER_TURN):
            if start:
                await asyncio.sleep(0)
            part = group[start : start + SETTLE_PER_TURN]
            self._complete(part)
            self._writes.settled(len(part))

    @property
    def in_flight(self) -> int:
        """Publications accepted and not settled yet (staged, being written, or durable and
        not yet answered)."""
        return self._writes.in_flight

    def _complete(self, group: list[Publication]) -> None:
        """Every entry of ``group`` is durable: move the marks, answer, wake the readers.

        The publications are resolved first, then each connection is told once
        (``on_settled``), so the receipts of a whole group leave a connection in one write."""
        dedup = self.dedup
        window = self.idempotency
        latency = self._stats.publish_latency_ms
        if window is not None:
            # The group's keys become durable before any of it is answered (the window's own
            # loop, compiled: one call per group; settling then needs no table).
            window.persist_group(group)
        counts, total = settle_durable(group, time.monotonic(), latency.bounds)
        latency.observe_counted(counts, total)
        if dedup is not None:
            move_dedup_marks(dedup, group)
        if window is not None and group:
            last = group[-1].position
            assert last is not None
            window.on_entries_persisted(len(group), last)
        # Receipts first: a client producing and consuming on one connection gets the receipt
        # of an entry before the entry itself, and the readers dispatch in this same turn.
        notify_settled(group)
        self._wake_readers()
        if dedup is not None and dedup.snapshot_due_by_entries():
            self.take_dedup_snapshot()
        interval = self._config.broker_deduplication_entries_interval
        if window is not None and window.snapshot_due(interval):
            take_idempotency_snapshot(self._ledger, window)

    def _on_flush_failed(self, group: list[Publication], exc: BaseException) -> None:
        """A write or fsync failed (module docstring, step 3).

        A group spanning a segment roll is written segment by segment, so its first part may be
        durable when a later part fails. That part is in the log: it is completed like any
        durable entry (failing it would make the client resend it, and store it twice). The
        rest of the group, and everything staged behind it, is failed.
        """
        self._stats.persistence_errors += 1
        log.error("%s: ledger flush failed: %s", self._name.full_name, exc)
        durable = self._ledger.last_confirmed_position
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
        if self._commit is not None:
            self._commit.group_full.clear()
        settled = written + len(failed)
        error = PersistenceError(f"Failed to persist entry: {exc}")
        known = self._failed_producers
        lost: set[Producer] = known if isinstance(known, set) else set()
        for write in failed:
            lost.add(write.producer)
            if self.idempotency is not None:
                self.idempotency.on_write_failed(write.ticket)
            write.fail(error)
        if lost:
            self._failed_producers = lost
        if self.dedup is not None:
            self.dedup.on_write_failed()
        self._writes.settled(settled)
        notify_settled(failed)

    async def close(self) -> None:
        """Stop accepting; write what is staged (unload): returns once the last group settled."""
        self._closed = True
        commit = self._commit
        if commit is None or commit.task is None:
            return  # nothing was ever accepted: nothing to write
        commit.dirty.set()
        commit.group_full.set()  # no point waiting for more: nothing new will be accepted
        with contextlib.suppress(Exception):
            await commit.task

    async def abandon(self) -> None:
        """Stop as if the process died: what is staged is never written nor answered."""
        self._closed = True
        commit = self._commit
        if commit is None or commit.task is None:
            return
        commit.task.cancel()
        await asyncio.gather(commit.task, return_exceptions=True)

    # ------------------------------------------------------------------ PIP-6 state

    @property
    def cursor_io(self) -> asyncio.Lock:
        """The topic's lock around cursor-file I/O (``Topic.cursor_io``); an idle topic never
        makes one (issue #26)."""
        if self._cursor_io is None:
            self._cursor_io = asyncio.Lock()
        return self._cursor_io

    def take_dedup_snapshot(self) -> None:
        """Mark-delete the dedup cursor at the last persisted entry, with the persisted marks as
        its properties. In memory here; the housekeeping task (or close) persists the cursor,
        and until then the previous snapshot plus a longer replay rebuilds the same state."""
        dedup = self.dedup
        assert dedup is not None
        position = dedup.last_persisted_position
        if position is None:
            return
        snapshot = dedup.snapshot()
        self._ledger.open_cursor(DEDUP_CURSOR).mark_delete(position, properties=snapshot)
        dedup.on_snapshot_taken(position, self._clock())
        self.last_snapshot_wall_time = time.time()

    def snapshot_on_close(self) -> None:
        """A clean unload leaves nothing to replay on the next load (``Ledger.close`` persists
        the cursors the snapshots are taken on)."""
        dedup = self.dedup
        if dedup is not None and dedup.entries_since_snapshot > 0:
            with contextlib.suppress(Exception):
                self.take_dedup_snapshot()
        window = self.idempotency
        if window is not None and window.entries_since_snapshot > 0:
            with contextlib.suppress(Exception):
                take_idempotency_snapshot(self._ledger, window)

    def maybe_snapshot_dedup_by_time(self) -> None:
        """Java's periodic snapshot task, run every brokerDeduplicationSnapshotFrequencyInSeconds
        (0 disables it): snapshot if entries were persisted and the interval has passed."""
        frequency = self._config.broker_deduplication_snapshot_frequency_in_seconds
        if frequency <= 0:
            return
        now = self._clock()
        if now - self._last_snapshot_check < frequency:
            return
        self._last_snapshot_check = now
        if self.dedup is not None and self.dedup.should_snapshot(now):
            self.take_dedup_snapshot()

    def maybe_purge_inactive_producers(self) -> None:
        now = self._clock()
        if self.dedup is None or now - self._last_purge_check < _PURGE_CHECK_INTERVAL_S:
            return
        self._last_purge_check = now
        timeout = self._config.broker_deduplication_producer_inactivity_timeout_minutes * 60.0
        purged = self.dedup.purge_inactive(now, timeout)
        if purged:
            log.info("%s: forgot %d inactive producer(s)", self._name.full_name, len(purged))

    async def set_dedup_enabled(self, enabled: bool) -> None:
        """Apply a policy change (T2/T3).

        Disabling forgets every mark and deletes the dedup cursor. Enabling starts tracking
        afresh: the cursor is created (and persisted) at the end of the log, so the next load
        replays only what is written from now on, and names seen before are unknown again.
        """
        ledger = self._ledger
        if enabled and self.dedup is None:
            dedup: MessageDeduplication[Position] = MessageDeduplication(
                dedup_config_from(self._config)
            )
            for producer in self._producers.producers:
                dedup.producer_connected(producer.name)
            async with self.cursor_io:
                if DEDUP_CURSOR in ledger.cursors:  # left over; never reuse its snapshot
                    ledger.detach_cursor(DEDUP_CURSOR)
                    await run_to_completion(ledger.remove_cursor_file, DEDUP_CURSOR)
                # Positioned and tracking from the same loop step, so dedup and the cursor
                # cover the same entries; the file follows from a disk thread (a crash before
                # it leaves no cursor: dedup then restarts afresh, as if never enabled).
                cursor = ledger.add_cursor(ledger.new_cursor(DEDUP_CURSOR, InitialPosition.Latest))
                self.dedup = dedup
                self.last_snapshot_wall_time = None
                await run_to_completion(cursor.persist)
        elif not enabled and self.dedup is not None:
            self.dedup.clear()
            self.dedup = None
            self.last_snapshot_wall_time = None
            async with self.cursor_io:
                if DEDUP_CURSOR in ledger.cursors:
                    ledger.detach_cursor(DEDUP_CURSOR)
                    await run_to_completion(ledger.remove_cursor_file, DEDUP_CURSOR)
