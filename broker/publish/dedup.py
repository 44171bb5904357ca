"""PIP-6 message deduplication: the pure per-topic state.

One `MessageDeduplication` per topic remembers, per *producer name*, the highest sequence id
the topic has accepted. It does no I/O and reads no clock: the topic feeds it sequence ids,
ledger positions and monotonic timestamps, and stores the snapshots it hands out.

Two maps, as in Pulsar's `MessageDeduplication`:

* ``highest_pushed[name]``: the highest id handed to storage, updated by `check` the moment
  an entry is accepted, before it is durable.
* ``highest_persisted[name]``: the highest id storage confirmed durable, updated by
  `on_persisted` after the fsync.

Invariants (checked by the property test in ``tests/broker/publish/test_dedup.py``):

1. For every name, ``highest_persisted[name] <= highest_pushed[name]``; every name in
   ``highest_persisted`` is in ``highest_pushed``. A gap between the two means writes of that
   name are in flight.
2. Both marks only grow, except that `on_write_failed` lowers *pushed* back to *persisted*
   (the write it covered never happened) and `purge_inactive` / `clear` forget names.
3. Dedup is a high-water mark, not a set: an id at or below the mark is a duplicate even if
   it was never seen (Pulsar's C4 scenario); gaps above the mark are allowed.
4. After recovery ``highest_pushed == highest_persisted`` == the snapshot overlaid with the
   replay of every entry stored after the snapshot's position.

Lifecycle: ``RECOVERING -> READY``. A fresh instance (dedup newly enabled) starts READY and
empty. `begin_recovery` builds one in RECOVERING from a snapshot; `replay` feeds it the
entries written after the snapshot (in as many chunks as the reader likes); `finish_recovery`
moves it to READY exactly once. Every query and update other than connection bookkeeping
raises `DedupStateError` outside READY, so the topic cannot accept a message before the
replay is complete, and a second replay of the same instance is refused (the race of Pulsar
issue #25954). A recovery that fails part-way is abandoned: start again with a new instance,
never resume a half-replayed one.

Times are seconds from a monotonic clock chosen by the caller (``time.monotonic()``), never
wall time, so a wall-clock jump neither purges producers nor delays snapshots.

Decisions that differ from the Java broker (each one is on the side of never losing a message):

* Batch range (`batch_highest_sequence_id`): a C++ batch carries only its first id; we take
  ``first + num_messages - 1`` as its last id, where Java records only the first one.
* A batch straddling the persisted mark (R8, Pulsar #6273): its first id is at or below
  ``highest_persisted`` but its last id is above it, and nothing of that name is in flight.
  Java judges by the first id and answers DUP, so the new messages of the batch are
  acknowledged with ``-1:-1`` and silently lost. Pulsar fixed #6273 in the *Java client*,
  which sends a possibly-duplicate message in a batch of its own; the C++ client behind the
  Python client (4.2.0) has no such logic, so an application that replays a window of explicit
  ids from its own checkpoint (the canonical dedup use) sends exactly such batches. A broker
  cannot store part of a batch without rewriting the entry (its payload may be compressed or
  encrypted, and the client derives message ids from batch indexes), so we store the batch
  whole: the ids at or below the mark in that one batch are duplicated, the new ones are kept.
  At-least-once is the floor dedup falls back to, never loss. `check` counts these batches
  (``straddling_batches``) so an operator sees when it happens. A batch entirely at or below
  the mark is a duplicate; one overlapping ids still in flight is UNKNOWN, as in Java.
* `last_sequence_id` answers the *pushed* mark, as Java does (see there for why).
* Chunked messages (PIP-37): every chunk carries the message's sequence id, and Java stores all
  but the last chunk unconditionally; we track the progress of the chunked message in flight so
  that a resend is stored once (``broker.publish.dedup_chunks``).

The vocabulary (verdict, states, config) is in ``broker.publish.dedup_types``, the snapshot's
map in ``broker.publish.dedup_marks``; all of it is importable from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from broker.publish.dedup_chunks import ChunkedMessages
from broker.publish.dedup_marks import decode_marks, encode_marks
from broker.publish.dedup_types import (
    NO_SEQUENCE_ID,
    DedupConfig,
    DedupResult,
    DedupState,
    DedupStateError,
    ReplayRecord,
)
from protocol.send_identity import highest_sequence_id as highest_sequence_id_of

__all__ = [
    "DedupConfig",
    "DedupResult",
    "DedupState",
    "DedupStateError",
    "MessageDeduplication",
    "ReplayRecord",
    "batch_highest_sequence_id",
]

P = TypeVar("P")
"""The ledger position type (``broker.storage.Position``); only compared for equality here."""

# Module-level aliases: the hot path avoids an enum class attribute lookup per entry.
_NOT_DUP = DedupResult.NOT_DUP
_READY = DedupState.READY
_BELOW_ANY_ID = NO_SEQUENCE_ID - 1
#: The chunk progress of a topic that never saw a chunk (shared, read-only).
_NO_CHUNKS: Mapping[str, tuple[int, int]] = MappingProxyType({})


def batch_highest_sequence_id(
    sequence_id: int, highest_sequence_id: int | None, num_messages: int
) -> int:
    """The highest sequence id an entry covers, for `MessageDeduplication.check`.

    The rule lives with the codec (``protocol.send_identity.highest_sequence_id``, where its
    reasons are written), so the publish path and the replay decide an entry's range alike.
    """
    return highest_sequence_id_of(sequence_id, highest_sequence_id, num_messages)


class MessageDeduplication(Generic[P]):
    """PIP-6 dedup state of one topic; see the module docstring for the invariants."""

    # One per loaded topic: slots, not an instance dict (~300 B less per topic, issue #26).
    __slots__ = (
        "_accepted",
        "_chunks",
        "_config",
        "_connections",
        "_duplicates",
        "_entries_at_snapshot",
        "_inactive_since",
        "_last_persisted_position",
        "_last_snapshot_position",
        "_last_snapshot_time",
        "_pending_snapshot",
        "_persisted",
        "_persisted_entries",
        "_purged",
        "_pushed",
        "_recovery_seconds",
        "_replayed_entries",
        "_state",
        "_straddling",
        "_unknowns",
        "_unreadable_entries",
        "_write_failures",
    )

    def __init__(self, config: DedupConfig | None = None) -> None:
        self._config = config if config is not None else DedupConfig()
        self._state = DedupState.READY
        self._pushed: dict[str, int] = {}
        # Kept in order of last persist (oldest first): a name is moved to the end each time it
        # is persisted, so the snapshot bound can keep the most recently active producers
        # without a separate timestamp per name.
        self._persisted: dict[str, int] = {}
        # Chunked messages in flight (module docstring); None until the first chunk (most
        # topics never see one: ~200 B per loaded topic, issue #26). See `_chunks_made`.
        self._chunks: ChunkedMessages | None = None
        # Connection bookkeeping for the inactivity purge (Pulsar's inactiveProducers). A
        # count, not a flag, so two producers briefly sharing a name during a reconnect do not
        # let the first disconnect mark the name idle.
        self._connections: dict[str, int] = {}
        self._inactive_since: dict[str, float] = {}
        self._reset_bookkeeping()

    def _chunks_made(self) -> ChunkedMessages:
        """The chunked messages in flight, made now if this is the first chunk."""
        if self._chunks is None:
            self._chunks = ChunkedMessages()
        return self._chunks

    def _reset_bookkeeping(self) -> None:
        self._last_persisted_position: P | None = None
        self._persisted_entries = 0
        self._entries_at_snapshot = 0
        self._pending_snapshot: tuple[P, int] | None = None
        self._last_snapshot_position: P | None = None
        self._last_snapshot_time: float | None = None
        self._recovery_seconds: float | None = None
        self._replayed_entries = 0
        self._unreadable_entries = 0
        self._accepted = 0
        self._duplicates = 0
        self._unknowns = 0
        self._straddling = 0
        self._write_failures = 0
        self._purged = 0

    # ------------------------------------------------------------------ recovery

    @classmethod
    def begin_recovery(
        cls,
        snapshot: Mapping[str, int],
        *,
        config: DedupConfig | None = None,
        snapshot_position: P | None = None,
    ) -> MessageDeduplication[P]:
        """A RECOVERING instance seeded from the last snapshot (the dedup cursor's properties).

        ``snapshot_position`` is where the snapshot was taken (the cursor's mark-delete), or
        None when there is no snapshot yet and the replay starts at the beginning of the log.
        """
        dedup: MessageDeduplication[P] = cls(config)
        dedup._state = DedupState.RECOVERING
        dedup._persisted, chunks = decode_marks(snapshot)
        if chunks:
            dedup._chunks_made().restore(chunks)
        dedup._last_persisted_position = snapshot_position
        dedup._last_snapshot_position = snapshot_position
        return dedup

    def replay(self, records: Iterable[ReplayRecord]) -> int:
        """Apply stored entries that follow the snapshot, in log order; returns how many.

        Unlike Java, which overwrites, the mark keeps the maximum: a log can hold an entry whose
        write was reported failed yet landed, followed by its retry, and the mark must not step
        back below ids already in the log.
        """
        self._require(DedupState.RECOVERING, "replay")
        persisted = self._persisted
        count = 0
        for producer_name, sequence_id, highest_sequence_id in records:
            high = max(sequence_id, highest_sequence_id)
            previous = persisted.pop(producer_name, None)
            persisted[producer_name] = high if previous is None or previous < high else previous
            count += 1
        self._replayed_entries += count
        return count

    def replay_chunk(self, producer_name: str, sequence_id: int, chunk_id: int) -> None:
        """Apply one stored chunk that is not the last of its message, in log order with
        `replay` (flush records buffered for `replay` first)."""
        self._require(DedupState.RECOVERING, "replay_chunk")
        self._chunks_made().replay(producer_name, sequence_id, chunk_id)
        self._replayed_entries += 1

    def note_unreadable_entry(self) -> None:
        """The replay met an entry whose metadata does not parse; it was skipped (counted)."""
        self._require(DedupState.RECOVERING, "note_unreadable_entry")
        self._unreadable_entries += 1

    def finish_recovery(
        self, *, now: float, last_position: P | None = None, elapsed_s: float | None = None
    ) -> None:
        """RECOVERING -> READY, exactly once.

        ``last_position`` is the last entry replayed (the end of the log); when the replay was
        empty it defaults to the snapshot position. The replayed entries count towards the next
        snapshot, so a long replay is followed by a snapshot soon (Pulsar #22479). Every
        recovered name starts the inactivity clock at ``now``, as in Java: a producer that
        never comes back is purged after the timeout. ``elapsed_s``, how long the caller's
        recovery took, is only reported in `stats`.
        """
        self._require(DedupState.RECOVERING, "finish_recovery")
        self._recovery_seconds = elapsed_s
        self._pushed = dict(self._persisted)
        if self._chunks is not None:
            self._chunks.finish_recovery(self._persisted)
        if last_position is not None:
            self._last_persisted_position = last_position
        self._persisted_entries = self._replayed_entries
        for name in self._persisted:
            if name not in self._connections:
                self._inactive_since[name] = now
        self._state = DedupState.READY

    @classmethod
    def recover(
        cls,
        snapshot: Mapping[str, int],
        replay: Iterable[ReplayRecord],
        *,
        now: float,
        config: DedupConfig | None = None,
        snapshot_position: P | None = None,
        last_position: P | None = None,
    ) -> MessageDeduplication[P]:
        """`begin_recovery` + `replay` + `finish_recovery` for a replay already at hand."""
        dedup: MessageDeduplication[P] = cls.begin_recovery(
            snapshot, config=config, snapshot_position=snapshot_position
        )
        dedup.replay(replay)
        dedup.finish_recovery(now=now, last_position=last_position)
        return dedup

    @property
    def state(self) -> DedupState:
        return self._state

    def _require(self, state: DedupState, operation: str) -> None:
        if self._state is not state:
            raise DedupStateError(
                f"{operation}() needs dedup state {state.value}, it is {self._state.value}"
            )

    # ------------------------------------------------------------------ publishing

    def may_be_duplicate(self, producer_name: str, sequence_id: int) -> bool:
        """Whether `check` would need more than the first id (``sequence_id <= pushed``): only
        then need a batch be looked into for its exact highest id (the rare path)."""
        pushed = self._pushed.get(producer_name)
        return pushed is not None and sequence_id <= pushed

    def check_above_pushed(
        self, producer_name: str, sequence_id: int, highest_sequence_id: int
    ) -> DedupResult | None:
        """`check`'s common case in one call: a first id above the pushed mark is NOT_DUP (ids
        pushed); else None, nothing changed (the caller may refine the highest id first)."""
        if self._state is not _READY:
            self._require(DedupState.READY, "check")
        pushed = self._pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            return None
        high = highest_sequence_id if highest_sequence_id > sequence_id else sequence_id
        self._pushed[producer_name] = high
        self._accepted += 1
        return _NOT_DUP

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DedupResult:
        """Java's ``isDuplicate``, with the batch range: classify an entry; if new, push its ids.

        ``highest_sequence_id`` is the last id the entry covers (`batch_highest_sequence_id`;
        equal to ``sequence_id`` for a single message); a smaller value counts as
        ``sequence_id`` (Java's ``max``).

        * first id above the pushed mark: NOT_DUP, whatever the range (gaps are allowed).
        * whole range at or below the persisted mark: DUP.
        * otherwise, if ids of this name are in flight (pushed > persisted): UNKNOWN; the
          entry may overlap a write whose outcome is not known yet (D2, D4, D6).
        * otherwise the batch straddles the persisted mark with nothing in flight: NOT_DUP,
          stored whole (see the module docstring, R8 / Pulsar #6273).
        """
        verdict = self.check_above_pushed(producer_name, sequence_id, highest_sequence_id)
        if verdict is not None:
            return verdict
        high = highest_sequence_id if highest_sequence_id > sequence_id else sequence_id
        pushed = self._pushed[producer_name]
        persisted = self._persisted.get(producer_name)
        if persisted is not None and high <= persisted:
            self._duplicates += 1
            return DedupResult.DUP
        if persisted is None or pushed > persisted:
            self._unknowns += 1
            return DedupResult.UNKNOWN
        self._pushed[producer_name] = high
        self._accepted += 1
        self._straddling += 1
        return DedupResult.NOT_DUP

    def check_chunk(
        self, producer_name: str, sequence_id: int, chunk_id: int, is_last: bool
    ) -> DedupResult:
        """`check` for one chunk of a chunked message (``broker.publish.dedup_chunks``).

        * a sequence id at or below the pushed mark: the whole message was pushed already, so
          this is `check` of that id (DUP, or UNKNOWN while it is in flight).
        * otherwise the chunk is judged against the progress of its message
          (`ChunkedMessages.check`); a new last chunk moves the pushed mark to the message's id.
        """
        if self._state is not _READY:
            self._require(DedupState.READY, "check_chunk")
        pushed = self._pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            return self.check(producer_name, sequence_id, sequence_id)
        verdict = self._chunks_made().check(producer_name, sequence_id, chunk_id, is_last)
        if verdict is _NOT_DUP:
            if is_last:
                self._pushed[producer_name] = sequence_id
            self._accepted += 1
        elif verdict is DedupResult.DUP:
            self._duplicates += 1
        else:
            self._unknowns += 1
        return verdict

    def on_chunk_persisted(
        self, producer_name: str, sequence_id: int, chunk_id: int, position: P
    ) -> None:
        """Storage made a chunk that is not the last of its message durable (log order).

        The last chunk is reported with `on_persisted`, like any complete entry."""
        if self._state is not _READY:
            self._require(DedupState.READY, "on_chunk_persisted")
        self._chunks_made().on_persisted(producer_name, sequence_id, chunk_id)
        self._last_persisted_position = position
        self._persisted_entries += 1

    def on_persisted(
        self, producer_name: str, highest_sequence_id: int, position: P, count: int = 1
    ) -> None:
        """Storage made one entry durable at ``position`` (or ``count`` whole entries of this
        name, the largest id and the last position of the run); call in log order.

        Also lifts *pushed* if it is lower, keeping invariant 1 even if the topic reports a
        persist after a `on_write_failed` that did not cover this entry.
        """
        if self._state is not _READY:
            self._require(DedupState.READY, "on_persisted")
        persisted = self._persisted
        previous = persisted.pop(producer_name, None)
        if previous is None or previous < highest_sequence_id:
            persisted[producer_name] = highest_sequence_id
        else:
            persisted[producer_name] = previous
        pushed = self._pushed
        if pushed.get(producer_name, _BELOW_ANY_ID) < highest_sequence_id:
            pushed[producer_name] = highest_sequence_id
        chunks = self._chunks
        if chunks is not None and (chunks.persisted or chunks.pushed):
            chunks.on_message_persisted(producer_name, highest_sequence_id)
        self._last_persisted_position = position
        self._persisted_entries += count

    def on_write_failed(self) -> None:
        """A write failed: every in-flight id, of every producer, is back to not stored.

        pushed := persisted for all names (Pulsar #5218, D7): otherwise the client's retry of
        the failed id would be answered as a duplicate and the message silently lost. Call it
        once the failed write and everything queued behind it have been failed back to the
        clients.
        """
        self._require(DedupState.READY, "on_write_failed")
        self._pushed = dict(self._persisted)
        if self._chunks is not None:
            self._chunks.on_write_failed()
        self._write_failures += 1

    def last_sequence_id(self, producer_name: str) -> int:
        """PRODUCER_SUCCESS.last_sequence_id for ``producer_name``, or -1 if unknown.

        Returns the *pushed* mark, like Java's ``getLastPublishedSequenceId``. The two marks
        differ only while a write of this name is in flight. Answering the persisted mark then
        would tell a re-created producer to resume at an id that is already pushed: its first
        new message would get UNKNOWN, be retried, and once the in-flight write lands be dropped
        as a duplicate although its content is new. Answering the pushed mark cannot lose an
        acknowledged message (every receipted id is <= persisted <= pushed). If the in-flight
        write then fails, pushed falls back and the producer's numbering has a gap, which
        dedup allows.
        """
        self._require(DedupState.READY, "last_sequence_id")
        return self._pushed.get(producer_name, NO_SEQUENCE_ID)

    @property
    def highest_pushed(self) -> Mapping[str, int]:
        """Read-only view of the pushed marks."""
        return MappingProxyType(self._pushed)

    @property
    def highest_persisted(self) -> Mapping[str, int]:
        """Read-only view of the persisted marks, least recently persisted first."""
        return MappingProxyType(self._persisted)

    @property
    def last_persisted_position(self) -> P | None:
        """Position of the last entry reported by `on_persisted` (or recovered)."""
        return self._last_persisted_position

    # ------------------------------------------------------------------ snapshots

    @property
    def entries_since_snapshot(self) -> int:
        return self._persisted_entries - self._entries_at_snapshot

    def snapshot_due_by_entries(self) -> bool:
        """Whether ``entries_interval`` entries were persisted since the last snapshot (checked
        by the topic after every group commit; Java checks it on every persist)."""
        if self._state is not DedupState.READY or self._last_persisted_position is None:
            return False
        return self.entries_since_snapshot >= self._config.entries_interval

    def should_snapshot(self, now: float) -> bool:
        """Whether the topic should store a snapshot now.

        After ``entries_interval`` persisted entries (Java checks this on every persist), or
        once ``snapshot_interval_s`` has passed since the last snapshot if at least one entry
        was persisted meanwhile (Java's periodic task: nothing to do on an unchanged topic).
        Never before anything has been persisted at a known position.
        """
        self._require(DedupState.READY, "should_snapshot")
        since = self.entries_since_snapshot
        if since <= 0 or self._last_persisted_position is None:
            return False
        if since >= self._config.entries_interval:
            return True
        interval = self._config.snapshot_interval_s
        if interval <= 0:
            return False
        last = self._last_snapshot_time
        return last is None or now - last >= interval

    def snapshot(self) -> dict[str, int]:
        """The persisted marks to store as the snapshot at `last_persisted_position`.

        Both are updated together by `on_persisted`, so reading them in the same event-loop
        step gives a consistent pair: the map describes exactly the log up to that position.

        Bounded to ``max_number_of_producers`` names, keeping the most recently persisted ones
        (Java keeps an arbitrary subset, the first ones its hash map yields). A name left out
        is forgotten by the next recovery unless it wrote after the snapshot. The map is ordered
        least recently persisted first, so a recovery restores that order.
        """
        self._require(DedupState.READY, "snapshot")
        position = self._last_persisted_position
        if position is None:
            raise DedupStateError("snapshot() before any entry was persisted")
        self._pending_snapshot = (position, self._persisted_entries)
        return encode_marks(
            self._persisted,
            self._chunks.persisted if self._chunks is not None else _NO_CHUNKS,
            self._config.max_number_of_producers,
        )

    def on_snapshot_taken(self, position: P, now: float) -> None:
        """The snapshot from the latest `snapshot()` call is durable at ``position``.

        Entries persisted between `snapshot()` and this call still count towards the next
        snapshot, so a snapshot stored off the event loop does not lose them.
        """
        self._require(DedupState.READY, "on_snapshot_taken")
        pending = self._pending_snapshot
        if pending is None or pending[0] != position:
            raise DedupStateError(
                f"on_snapshot_taken({position!r}) does not match the last snapshot() "
                f"taken at {None if pending is None else pending[0]!r}"
            )
        self._entries_at_snapshot = pending[1]
        self._pending_snapshot = None
        self._last_snapshot_position = position
        self._last_snapshot_time = now

    # ------------------------------------------------------------------ producer activity

    def producer_connected(self, producer_name: str) -> None:
        """A producer with this name attached to the topic: it is active again."""
        self._connections[producer_name] = self._connections.get(producer_name, 0) + 1
        self._inactive_since.pop(producer_name, None)

    def producer_disconnected(self, producer_name: str, now: float) -> None:
        """A producer with this name detached; the name idles once its last producer has left."""
        remaining = self._connections.get(producer_name, 0) - 1
        if remaining > 0:
            self._connections[producer_name] = remaining
            return
        self._connections.pop(producer_name, None)
        self._inactive_since[producer_name] = now

    def purge_inactive(self, now: float, timeout_s: float) -> list[str]:
        """Forget names idle for longer than ``timeout_s`` (D8); returns the purged names.

        Connected names are never purged. Unlike Java, which empties its whole inactive list on
        every purge (so a name that idled for less than the timeout is never purged later), a
        name idle for less than the timeout stays listed for the next purge.
        """
        self._require(DedupState.READY, "purge_inactive")
        expired = [name for name, since in self._inactive_since.items() if now - since > timeout_s]
        for name in expired:
            del self._inactive_since[name]
            self._pushed.pop(name, None)
            self._persisted.pop(name, None)
            if self._chunks is not None:
                self._chunks.forget(name)
        self._purged += len(expired)
        return expired

    # ------------------------------------------------------------------ enable / disable, stats

    def clear(self) -> None:
        """Dedup was disabled (T2): forget every name and counter; re-enabling starts fresh.

        Also abandons a recovery in progress. Connected producers stay counted as connected,
        since their connections outlive the switch.
        """
        self._state = DedupState.READY
        self._pushed = {}
        self._persisted = {}
        self._chunks = None
        self._inactive_since = {}
        self._reset_bookkeeping()

    def stats(self) -> dict[str, object]:
        """Counters for the topic's stats endpoint and for tests."""
        return {
            "state": self._state.value,
            # During a recovery only the persisted map is being built.
            "tracked_producers": len(
                self._pushed if self._state is DedupState.READY else self._persisted
            ),
            "connected_producers": len(self._connections),
            "chunked_messages_in_flight": len(self._chunks.pushed) if self._chunks else 0,
            "inactive_producers": len(self._inactive_since),
            "accepted": self._accepted,
            "duplicates_dropped": self._duplicates,
            "unknown_answers": self._unknowns,
            "straddling_batches": self._straddling,
            "write_failures": self._write_failures,
            "purged_producers": self._purged,
            "replayed_entries": self._replayed_entries,
            "unreadable_entries_skipped": self._unreadable_entries,
            "recovery_seconds": self._recovery_seconds,
            "entries_since_snapshot": self.entries_since_snapshot,
            "last_persisted_position": self._last_persisted_position,
            "last_snapshot_position": self._last_snapshot_position,
            "last_snapshot_time": self._last_snapshot_time,
        }
