"""The idempotency-key window (issue #16): the pure per-topic state.

PIP-6 keeps one high-water mark per producer name, so it cannot help a *non-replayable source*
(many stateless senders, none of which can re-send "the same" sequence id after a crash), and it
checks only the latest id. Beside it, a message may carry an application key in the property
``magnetar.idempotency-key`` (`IDEMPOTENCY_KEY_PROPERTY`); per topic (per partition) a key seen
within the window is a duplicate. Keys are independent of producer names and sequence ids.

Semantics (`IdempotencyWindow.check`), per entry, keys checked per message of a batch:

* every keyed message of the entry is a duplicate (of a stored key, or of an earlier message
  of the same batch), and the entry has no keyless message: ``DUPLICATE``. Nothing is stored;
  the receipt names the entry holding the original of the entry's *first* message;
* a key of the entry is still being written (accepted, not yet durable): ``IN_FLIGHT``; the
  topic answers a retriable error, as PIP-6 does for its "unknown" answer, never a second copy;
* otherwise ``NEW``: the entry is stored; in a batch, the indexes whose key is a duplicate are
  *hidden*: `hidden_indexes` names them, and every subscription and reader treats them as
  acknowledged (PIP-54 ack sets), so no consumer ever sees them.

Window (deterministic edges):

* by time: a key accepted at ``t`` (broker wall clock, seconds, via the injectable ``clock``)
  is a duplicate for a message arriving at ``now`` iff ``now - t < window_seconds``; at exactly
  ``t + window_seconds`` it has left the window and the message is stored as new. The live
  window keeps ``t`` exactly as the clock gave it (no rounding: a key rounded to the millisecond
  could leave up to 1 ms early, i.e. a duplicate be stored);
* by count: at most ``max_keys`` durable keys; accepting one more evicts the oldest first
  (first-accepted, first-evicted). Keys still being written are never evicted nor expired (a
  retry of one must still meet the in-flight answer), so the window may exceed ``max_keys`` by
  the keys in flight;
* ``window_seconds == 0`` turns checking off: keys are stored as ordinary properties. Hidden
  indexes recorded earlier stay hidden whatever the settings.

Keys are accepted in publish order and stored in that order, so the window is always a
*suffix* of the accepted keys (time and count both cut at the oldest end).

Recovery (`broker.publish.idempotency_snapshot`): the snapshot (stamps rounded *up* to the
millisecond, `pack_location`), then a replay of the entries after
it (`replay`) with neither time nor count eviction, keys met stamped with the recovery time: a crash
may keep a key longer than the window, never forget one early. Which indexes of a batch were
hidden is re-derived from the keys (a key already known is a duplicate), which is exact except
for one case the log cannot tell apart: a key that had *left* the window (expired or evicted) and
came back inside a batch written after the last snapshot; the replay hides that copy, so
consumers see the key's earlier copy only. Snapshots are taken every
``max(brokerDeduplicationEntriesInterval, keys in the window)`` entries, which bounds both the
replay and that case.

Storage (issue #26): the window keeps each key as its BLAKE2b-128 digest
(`protocol.idempotency_scan.key_digest`) in `broker.publish.idempotency_table.KeyTable`, about
60-98 B per key. Collision rule: two different keys with one digest would make the second a
"duplicate" of the first and drop it. For keys that are not chosen to collide, the probability
over a window of n keys is at most n**2 / 2**129 (about 1.5e-27 for a million keys); BLAKE2b is a
cryptographic hash, so finding two keys that collide on purpose takes about 2**64 hash
evaluations, and matching a given key (to drop another sender's message) about 2**128. Both are
negligible next to an undetected disk error, so a digest match is taken as the same key.

Nothing here does I/O or reads a clock other than ``clock``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from broker.publish.idempotency_gate import KeyGate
from broker.publish.idempotency_table import (
    DURABLE,
    IN_FLIGHT,
    STAMP_MASK,
    PyKeySnapshot,
    pack_location,
    stamp_ms,
    unpack_location,
)
from broker.storage import Position
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, IDEMPOTENCY_KEY_PROPERTY
from protocol.idempotency_scan import key_digest

__all__ = [
    "IDEMPOTENCY_CURSOR",
    "IDEMPOTENCY_KEY_PROPERTY",
    "Admission",
    "IdempotencyWindow",
    "Key",
    "Ticket",
    "Verdict",
    "WindowConfig",
    "digest_of",
    "pack_location",
    "stamp_ms",
    "unpack_location",
    "visible_ack_set",
]

IDEMPOTENCY_CURSOR = "magnetar.idempotency"
"""The reserved cursor whose mark-delete carries the window's snapshot (like ``pulsar.dedup``)."""

_WORD_BITS = 64

Key = bytes | str
"""A key as the window takes it: its 16-byte digest (what the key scan yields), or the key
itself (tests, admin look-ups), digested on the way in."""


def digest_of(key: Key) -> bytes:
    """The digest of a key given as a string; a digest as it is."""
    if isinstance(key, str):
        return key_digest(key.encode())
    return key


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """``idempotencyWindowSeconds`` / ``idempotencyWindowMaxKeys`` after the policies."""

    window_seconds: float = 120.0
    max_keys: int = 100_000
    #: The broker's ``maxMessageSize``: the most a compressed batch may declare uncompressed
    #: for its keys to be read (``broker.publish.idempotency_keys``; issue #24).
    max_uncompressed_bytes: int = DEFAULT_MAX_MESSAGE_SIZE

    def __post_init__(self) -> None:
        if self.window_seconds < 0:
            raise ValueError(f"window_seconds must be >= 0, got {self.window_seconds}")
        if self.max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {self.max_keys}")

    @property
    def enabled(self) -> bool:
        return self.window_seconds > 0


class Verdict(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    IN_FLIGHT = "in_flight"


class Admission(NamedTuple):
    """What `IdempotencyWindow.check` decided for one entry (a tuple: built on the hot path)."""

    verdict: Verdict
    #: DUPLICATE: the entry holding the original of the entry's first message.
    original: Position | None = None
    #: NEW: the digests this entry brings into the window, in batch order ...
    new_keys: tuple[bytes, ...] = ()
    #: ... and their batch indexes (None: the one key of a single message, index 0).
    new_indexes: tuple[int, ...] | None = None
    #: NEW: bitmask of the batch indexes that are duplicates (hidden from every consumer).
    hidden: int = 0


_NEW_KEYLESS = Admission(Verdict.NEW)
_IN_FLIGHT = Admission(Verdict.IN_FLIGHT)


class Ticket:
    """Keys of one accepted entry while it is being written (`IdempotencyWindow.admit`): its
    keys took the table slots ``first``, ``first + 1``, ... (added together, in order)."""

    __slots__ = ("first", "hidden", "indexes")

    def __init__(self, first: int, indexes: tuple[int, ...] | None, hidden: int) -> None:
        self.first = first
        self.indexes = indexes
        self.hidden = hidden

    def slots(self) -> Iterable[tuple[int, int]]:
        """(batch index, table slot) of each key."""
        if self.indexes is None:
            return ((0, self.first),) if self.first >= 0 else ()
        return ((index, self.first + n) for n, index in enumerate(self.indexes))


class IdempotencyWindow(KeyGate):
    """The window of one topic (partition); see the module docstring. The keyed SEND's step
    (the table, the clock and the last stamp) is its base, `KeyGate` (compiled, issue #26)."""

    # One per loaded topic: slots, not an instance dict (issue #26).
    __slots__ = (
        "_config",
        "_entries_since_snapshot",
        "_hidden",
        "_last_persisted_position",
        "checking",
        "duplicates",
        "hidden_messages",
        "in_flight_answers",
        "recovery_seconds",
        "replayed_entries",
    )

    def __init__(
        self, config: WindowConfig | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._config = config if config is not None else WindowConfig()
        #: ``config.enabled``, read by the SEND path for every entry (a plain attribute).
        self.checking = self._config.enabled
        # Digests in acceptance order, each in flight or durable (module docstring, "Storage"),
        # in the gate's table (the shared empty one until the first key).
        self._init_gate(clock, self._config.window_seconds, self._config.max_keys)
        #: position -> bitmask of hidden batch indexes (kept until the entry is trimmed); None
        #: until the first one (rare: a duplicate key inside a batch).
        self._hidden: dict[Position, int] | None = None
        self._last_persisted_position: Position | None = None
        self._entries_since_snapshot = 0
        self.duplicates = 0
        self.in_flight_answers = 0
        self.hidden_messages = 0
        #: Set by the recovery (`broker.publish.idempotency_snapshot`), reported in `stats`.
        self.recovery_seconds: float | None = None
        self.replayed_entries = 0

    # ------------------------------------------------------------------ settings

    @property
    def config(self) -> WindowConfig:
        return self._config

    def reconfigure(self, config: WindowConfig) -> None:
        """New policy values; a disabled window forgets its keys (not the hidden indexes)."""
        self._config = config
        self.checking = config.enabled
        self._seconds = config.window_seconds
        self._max_keys = config.max_keys
        if not config.enabled:
            self._table.clear_durable()
        else:
            self._expire(self._now())

    # ------------------------------------------------------------------ publish path

    def _now(self) -> float:
        # Stamps never go backwards (a wall-clock step back would reorder the window).
        now = self._clock()
        if now < self._last_stamp:
            now = self._last_stamp
        self._last_stamp = now
        return now

    def check(self, keys: Sequence[Key | None]) -> Admission:
        """Judge an entry whose messages carry ``keys`` (digests or keys; None: no key)."""
        if len(keys) == 1:  # the common case: one message, one key
            only = keys[0]
            if only is None:
                return _NEW_KEYLESS
            return self.check_one(digest_of(only))
        if not self._config.enabled:
            return _NEW_KEYLESS
        self._expire(self._now())
        return self._check_batch(keys)

    def check_one(self, digest: bytes) -> Admission:
        """`check` of a single message carrying the key of ``digest`` (the SEND path's case)."""
        config = self._config
        if config.window_seconds <= 0:
            return _NEW_KEYLESS
        now = self._clock()
        if now < self._last_stamp:
            now = self._last_stamp
        self._last_stamp = now
        table = self._table
        table.expire_older(now, config.window_seconds)
        if table.durable > config.max_keys:
            table.evict_over(config.max_keys)
        found = table.find(digest)
        if found < 0:
            return Admission(Verdict.NEW, None, (digest,))
        if table.state(found) != DURABLE:
            self.in_flight_answers += 1
            return _IN_FLIGHT
        self.duplicates += 1
        return Admission(Verdict.DUPLICATE, self._position(found))

    def reserve_one(self, digest: bytes) -> int | Position | None:
        """`check_one` and `admit` in one step, for one message with one key (the window is
        enabled): `reserve_key`, then `found_answer` when the key is live.

        Returns the ticket of a new key (its slot, in flight from now on: settle it with
        `on_persisted` or `on_write_failed` like any ticket); the position of the original
        for a duplicate; None while the key is in flight.
        """
        slot = self.reserve_key(digest)
        return slot if slot >= 0 else self.found_answer(slot)

    def found_answer(self, reserved: int) -> Position | None:
        """The answer to a key `reserve_key` (or ``reserve_entry``) found live, ``reserved ==
        -1 - seq``: the position of its durable original, or None while it is in flight."""
        found = -1 - reserved
        if self._table.state(found) != DURABLE:
            self.in_flight_answers += 1
            return None
        self.duplicates += 1
        return self._position(found)

    def _check_batch(self, keys: Sequence[Key | None]) -> Admission:
        table = self._table
        original: Position | None = None
        new_keys: list[bytes] = []
        new_indexes: list[int] = []
        seen_here: set[bytes] = set()
        hidden = 0
        any_new = False
        for index, key in enumerate(keys):
            if key is None:
                any_new = True
                continue
            digest = digest_of(key)
            found = table.find(digest)
            if found >= 0:
                if table.state(found) != DURABLE:
                    self.in_flight_answers += 1
                    return _IN_FLIGHT
                if index == 0:
                    original = self._position(found)
                hidden |= 1 << index
            elif digest in seen_here:
                hidden |= 1 << index  # a second copy inside the same batch
            else:
                seen_here.add(digest)
                new_keys.append(digest)
                new_indexes.append(index)
                any_new = True
        if not any_new:
            self.duplicates += len(keys)
            return Admission(Verdict.DUPLICATE, original=original)
        if not new_keys and not hidden:
            return _NEW_KEYLESS
        return Admission(Verdict.NEW, None, tuple(new_keys), tuple(new_indexes), hidden)

    def _position(self, found: int) -> Position:
        ledger_id, entry_id, _index = self._table.location(found)
        return Position(ledger_id, entry_id)

    def admit(self, admission: Admission) -> Ticket | None:
        """Record the keys of an entry the topic accepted (after PIP-6 said it is new)."""
        if admission.verdict is not Verdict.NEW:
            raise ValueError(f"admit() of a {admission.verdict.value} entry")
        if not admission.new_keys and not admission.hidden:
            return None
        # The stamp of the check just before (the clock is not read again: same instant).
        stamp = self._last_stamp
        add = self._writable_table().add
        new_keys = admission.new_keys
        if len(new_keys) == 1:
            return Ticket(add(new_keys[0], stamp), admission.new_indexes, admission.hidden)
        first = -1
        for digest in new_keys:
            slot = add(digest, stamp)
            if first < 0:
                first = slot
        return Ticket(first, admission.new_indexes, admission.hidden)

    def on_persisted(self, ticket: Ticket | int | None, position: Position) -> None:
        """The entry is durable at ``position`` (every entry, keyed or not, in log order)."""
        self._last_persisted_position = position
        self._entries_since_snapshot += 1
        if ticket is not None:
            self.on_keys_persisted(ticket, position)

    def on_entries_persisted(self, count: int, last: Position) -> None:
        """`on_persisted` of ``count`` entries without tickets, the last at ``last``: a group
        commit's in one call (their tickets went through `persist_group` just before)."""
        self._last_persisted_position = last
        self._entries_since_snapshot += count

    def on_keys_persisted(self, ticket: Ticket | int, position: Position) -> None:
        """The keys part of `on_persisted`: the ticket's keys are durable at ``position``."""
        table = self._table
        ledger_id, entry_id = position
        if type(ticket) is int:  # `reserve_one`'s: one key, batch index 0
            table.persist(ticket, ledger_id, entry_id, 0)
            if table.durable > self._config.max_keys:
                table.evict_over(self._config.max_keys)
            return
        assert isinstance(ticket, Ticket)
        if ticket.indexes is None:
            if ticket.first >= 0:
                table.persist(ticket.first, ledger_id, entry_id, 0)
        else:
            for index, slot in ticket.slots():
                table.persist(slot, ledger_id, entry_id, index)
        if ticket.hidden:
            if self._hidden is None:
                self._hidden = {}
            self._hidden[position] = ticket.hidden
            self.hidden_messages += ticket.hidden.bit_count()
        if table.durable > self._config.max_keys:
            table.evict_over(self._config.max_keys)

    def on_write_failed(self, ticket: Ticket | int | None) -> None:
        """The entry was not stored: its keys leave the window (a retry is new)."""
        if ticket is None:
            return
        table = self._table
        slots = ticket.slots() if isinstance(ticket, Ticket) else ((0, ticket),)
        for _index, slot in slots:
            if table.state(slot) == IN_FLIGHT:
                table.discard(slot)

    # ------------------------------------------------------------------ expiry

    def _expire(self, now: float) -> None:
        # Exactly the documented test, on the exact stamp: a key stays while now - t < window.
        table = self._table
        table.expire_older(now, self._config.window_seconds)
        if table.durable > self._config.max_keys:
            table.evict_over(self._config.max_keys)

    # ------------------------------------------------------------------ hidden indexes

    def hidden_indexes(self, position: Position) -> int:
        """Bitmask of the batch indexes of ``position`` no consumer may see (0: none)."""
        return self._hidden.get(position, 0) if self._hidden else 0

    def forget_hidden_before(self, first: Position | None) -> None:
        """Entries before ``first`` were trimmed from the log: their masks are not needed."""
        if first is None:
            self._hidden = None
        elif self._hidden:
            self._hidden = {p: m for p, m in self._hidden.items() if p >= first}

    # ------------------------------------------------------------------ snapshots and replay

    @property
    def last_persisted_position(self) -> Position | None:
        return self._last_persisted_position

    @property
    def entries_since_snapshot(self) -> int:
        return self._entries_since_snapshot

    def snapshot_due(self, min_entries: int) -> bool:
        """Whether to snapshot: after ``max(min_entries, keys in the window)`` entries, so the
        cost of a snapshot (proportional to the window) stays O(1) per entry amortised, and a
        replay covers at most that many entries."""
        since = self._entries_since_snapshot
        return since > 0 and since >= max(min_entries, self._table.durable)

    def snapshot_records(self) -> tuple[list[tuple[bytes, int]], dict[Position, int]]:
        """The durable keys' digests with their packed locations (`pack_location`, oldest
        first; stamps rounded up to the millisecond) and the hidden masks, describing the log
        up to `last_persisted_position`; keys in flight are after it and replayed if they land."""
        records: list[tuple[bytes, int]] = self._table.snapshot_records()
        self._entries_since_snapshot = 0
        return records, dict(self._hidden) if self._hidden else {}

    def snapshot_copy(self) -> tuple[PyKeySnapshot, dict[Position, int]]:
        """`snapshot_records` as a copy of the table's durable slots, to be rendered later as
        the JSON text of the snapshot's key properties (`PyKeySnapshot.json`; the compiled
        copy renders without the GIL), and the hidden masks."""
        keys = self._table.snapshot_copy()
        self._entries_since_snapshot = 0
        return keys, dict(self._hidden) if self._hidden else {}

    @classmethod
    def restore(
        cls,
        records: Iterable[tuple[Key, int]],
        hidden: Mapping[Position, int],
        *,
        config: WindowConfig | None = None,
        clock: Callable[[], float] = time.time,
        snapshot_position: Position | None = None,
    ) -> IdempotencyWindow:
        """A window rebuilt from a snapshot (records oldest first); then `replay` the log."""
        window = cls(config, clock)
        last_stamp_ms = 0
        for key, packed in records:
            table = window._writable_table()
            position, index, stamp = unpack_location(packed)
            digest = digest_of(key)
            if table.find(digest) >= 0:
                continue  # cannot happen in a snapshot this code wrote
            table.persist(table.add(digest, stamp), position.ledger_id, position.entry_id, index)
            last_stamp_ms = max(last_stamp_ms, packed & STAMP_MASK)
        window._last_stamp = last_stamp_ms / 1000
        window._hidden = dict(hidden) if hidden else None
        window._last_persisted_position = snapshot_position
        return window

    def replay(
        self, position: Position, keys: Sequence[Key | None], *, is_batch: bool, stamp: float
    ) -> None:
        """Apply one stored entry after the snapshot, in log order, as the live window did.

        A stored single message was new when written: its key is (re)inserted. In a batch, a key
        already in the window (or earlier in the batch) is taken to have been a duplicate:
        hidden, not refreshed; any other key is inserted. Neither time nor count evicts during
        the replay (`finish_replay` applies both). The one case the log cannot tell apart (module
        docstring, "Recovery"): a key that had *left* the live window and came back inside a
        batch after the snapshot is replayed as hidden (consumers keep its earlier copy).
        """
        self._last_persisted_position = position
        self._entries_since_snapshot += 1
        # Keys are tracked even when the window is off now: an entry written while it was on
        # must get its hidden indexes back (`finish_replay` then forgets the keys).
        hidden = 0
        seen_here: set[bytes] = set()
        table = self._writable_table() if any(key is not None for key in keys) else self._table
        ledger_id, entry_id = position
        for index, key in enumerate(keys):
            if key is None:
                continue
            digest = digest_of(key)
            found = table.find(digest)
            if is_batch and (found >= 0 or digest in seen_here):
                hidden |= 1 << index
                continue
            seen_here.add(digest)
            if found >= 0:
                table.discard(found)  # a single message re-sent after its key left: refreshed
            table.persist(table.add(digest, stamp), ledger_id, entry_id, index)
        if hidden:
            if self._hidden is None:
                self._hidden = {}
            self._hidden[position] = self._hidden.get(position, 0) | hidden

    def finish_replay(self) -> None:
        """After the replay: expire by time (stamps are real for snapshotted keys), or forget
        the keys if the window is off."""
        if self._config.enabled:
            self._expire(self._now())
        else:
            self._table.clear_durable()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._table)

    def original_of(self, key: Key) -> tuple[Position, int] | None:
        """Where the durable copy of ``key`` is (position, batch index), if in the window."""
        table = self._table
        found = table.find(digest_of(key))
        if found < 0 or table.state(found) != DURABLE:
            return None
        ledger_id, entry_id, index = table.location(found)
        return Position(ledger_id, entry_id), index

    def stats(self) -> dict[str, object]:
        durable = self._table.durable
        return {
            "enabled": self._config.enabled,
            "windowSeconds": self._config.window_seconds,
            "maxKeys": self._config.max_keys,
            "keys": durable,
            "keysInFlight": len(self._table) - durable,
            "duplicatesDropped": self.duplicates,
            "inFlightAnswers": self.in_flight_answers,
            "hiddenMessages": self.hidden_messages,
            "entriesWithHiddenIndexes": len(self._hidden) if self._hidden else 0,
            "expiredKeys": self._table.expired,  # the table counts keys leaving its head
            "evictedKeys": self._table.evicted,
            "replayedEntries": self.replayed_entries,
            "recoverySeconds": self.recovery_seconds,
        }


def visible_ack_set(ack_set: list[int] | None, hidden: int, batch_size: int) -> list[int]:
    """A PIP-54 ack set (Java ``BitSet`` words, set bit = still to deliver) with the ``hidden``
    indexes cleared: ``ack_set`` (None: every index) AND NOT ``hidden``, over the batch."""
    visible = ((1 << batch_size) - 1) & ~hidden
    if ack_set is not None:
        held = 0
        for word_index, word in enumerate(ack_set):
            held |= (word & 0xFFFF_FFFF_FFFF_FFFF) << (word_index * _WORD_BITS)
        visible &= held
    words = []
    for first in range(0, max(batch_size, 1), _WORD_BITS):
        word = (visible >> first) & 0xFFFF_FFFF_FFFF_FFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words
