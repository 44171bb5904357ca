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

Nothing here does I/O or reads a clock other than ``clock``.
"""

from __future__ import annotations

import enum
import math
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from broker.storage import Position
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, IDEMPOTENCY_KEY_PROPERTY

__all__ = [
    "IDEMPOTENCY_CURSOR",
    "IDEMPOTENCY_KEY_PROPERTY",
    "Admission",
    "IdempotencyWindow",
    "Ticket",
    "Verdict",
    "WindowConfig",
    "pack_location",
    "stamp_ms",
    "unpack_location",
    "visible_ack_set",
]

IDEMPOTENCY_CURSOR = "magnetar.idempotency"
"""The reserved cursor whose mark-delete carries the window's snapshot (like ``pulsar.dedup``)."""

_WORD_BITS = 64


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
    #: NEW: ``(batch_index, key)`` of the keys this entry brings into the window.
    new_keys: tuple[tuple[int, str], ...] = ()
    #: NEW: bitmask of the batch indexes that are duplicates (hidden from every consumer).
    hidden: int = 0


_NEW_KEYLESS = Admission(Verdict.NEW)
_IN_FLIGHT = Admission(Verdict.IN_FLIGHT)


class Ticket:
    """Keys of one accepted entry while it is being written (`IdempotencyWindow.admit`)."""

    __slots__ = ("hidden", "keys", "stamp")

    def __init__(self, keys: tuple[tuple[int, str], ...], hidden: int, stamp: float) -> None:
        self.keys = keys
        self.hidden = hidden
        self.stamp = stamp


# What the snapshot stores for a durable key (one int):
#   ((ledger_id << 64 | entry_id) << 21 | batch_index + 1) << 45 | stamp_ms
# Keys are stored in acceptance order, so sorting packed values restores that order.
# In memory a durable key's value is one int too (memory: one object per key instead of four),
# with the exact stamp instead of milliseconds: (location << 64) | IEEE-754 bits of the stamp.
_STAMP_BITS = 45
_INDEX_BITS = 21
_STAMP_MASK = (1 << _STAMP_BITS) - 1
_INDEX_MASK = (1 << _INDEX_BITS) - 1
_U64 = (1 << 64) - 1
_LIVE_STAMP_BITS = 64
_DOUBLE = struct.Struct("<d")
_QWORD = struct.Struct("<Q")


def _location(position: Position, batch_index: int) -> int:
    packed = (position.ledger_id << 64) | (position.entry_id & _U64)
    return (packed << _INDEX_BITS) | (batch_index + 1)


def _unpack_location_bits(location: int) -> tuple[Position, int]:
    batch_index = (location & _INDEX_MASK) - 1
    location >>= _INDEX_BITS
    return Position(location >> 64, location & _U64), batch_index


def stamp_ms(stamp: float) -> int:
    """The least whole millisecond ``ms`` with ``ms / 1000 >= stamp`` (as floats): a stamp
    rounded *up*, so a key restored from a snapshot may outlive the window by under a
    millisecond, never leave it early (truncating could forget a key up to 1 ms early)."""
    ms = math.floor(stamp * 1000)
    while ms / 1000 < stamp:
        ms += 1
    while (ms - 1) / 1000 >= stamp:
        ms -= 1
    return ms


def pack_location(position: Position, batch_index: int, stamp: float) -> int:
    """A snapshotted key's value: where its message is and when it was accepted (seconds,
    rounded up to the millisecond: `stamp_ms`)."""
    return (_location(position, batch_index) << _STAMP_BITS) | stamp_ms(stamp)


def unpack_location(packed: int) -> tuple[Position, int, float]:
    """Inverse of `pack_location` (the stamp to the millisecond)."""
    stamp = (packed & _STAMP_MASK) / 1000
    position, batch_index = _unpack_location_bits(packed >> _STAMP_BITS)
    return position, batch_index, stamp


def _stamp_bits(stamp: float) -> int:
    bits: int = _QWORD.unpack(_DOUBLE.pack(stamp))[0]
    return bits


def _live_value(position: Position, batch_index: int, bits: int) -> int:
    """A durable key's in-memory value: its location and the exact stamp (`_stamp_bits`)."""
    return (_location(position, batch_index) << _LIVE_STAMP_BITS) | bits


def _live_stamp(value: int) -> float:
    stamp: float = _DOUBLE.unpack(_QWORD.pack(value & _U64))[0]
    return stamp


def _live_position(value: int) -> Position:
    return _unpack_location_bits(value >> _LIVE_STAMP_BITS)[0]


class IdempotencyWindow:
    """The window of one topic (partition); see the module docstring."""

    def __init__(
        self, config: WindowConfig | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._config = config if config is not None else WindowConfig()
        self._clock = clock
        # key -> packed location (durable) or Ticket (being written). Insertion order is acceptance
        # order; ``_order`` holds the keys in that order for expiry from the oldest end.
        self._keys: dict[str, int | Ticket] = {}
        self._order: deque[str] = deque()
        # Keys removed from ``_keys`` out of order (a failed write): their entry in ``_order``
        # is stale and skipped when it reaches the front.
        self._stale: dict[str, int] = {}
        self._durable = 0
        self._last_stamp = 0.0
        #: position -> bitmask of hidden batch indexes (kept until the entry is trimmed).
        self._hidden: dict[Position, int] = {}
        self._last_persisted_position: Position | None = None
        self._entries_since_snapshot = 0
        self.duplicates = 0
        self.in_flight_answers = 0
        self.hidden_messages = 0
        self.expired = 0
        self.evicted = 0
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
        if not config.enabled:
            self._forget_durable_keys()
        else:
            self._expire(self._now())

    def _forget_durable_keys(self) -> None:
        in_flight = {k: v for k, v in self._keys.items() if isinstance(v, Ticket)}
        self._keys = dict(in_flight)
        self._order = deque(in_flight)
        self._stale = {}
        self._durable = 0

    # ------------------------------------------------------------------ publish path

    def _now(self) -> float:
        # Stamps never go backwards (a wall-clock step back would reorder the window).
        now = self._clock()
        if now < self._last_stamp:
            now = self._last_stamp
        self._last_stamp = now
        return now

    def check(self, keys: Sequence[str | None]) -> Admission:
        """Judge an entry whose messages carry ``keys`` (None: a message without a key)."""
        if not self._config.enabled:
            return _NEW_KEYLESS
        self._expire(self._now())
        known = self._keys
        if len(keys) == 1:  # the common case: one message, one key
            only = keys[0]
            if only is None:
                return _NEW_KEYLESS
            found = known.get(only)
            if found is None:
                return Admission(Verdict.NEW, None, ((0, only),), 0)
            if not isinstance(found, int):
                self.in_flight_answers += 1
                return _IN_FLIGHT
            self.duplicates += 1
            return Admission(Verdict.DUPLICATE, _live_position(found))
        original: Position | None = None
        new_keys: list[tuple[int, str]] = []
        seen_here: set[str] = set()
        hidden = 0
        any_new = False
        for index, key in enumerate(keys):
            if key is None:
                any_new = True
                continue
            found = known.get(key)
            if found is not None:
                if not isinstance(found, int):
                    self.in_flight_answers += 1
                    return _IN_FLIGHT
                if index == 0:
                    original = _live_position(found)
                hidden |= 1 << index
            elif key in seen_here:
                hidden |= 1 << index  # a second copy inside the same batch
            else:
                seen_here.add(key)
                new_keys.append((index, key))
                any_new = True
        if not any_new:
            self.duplicates += len(keys)
            return Admission(Verdict.DUPLICATE, original=original)
        if not new_keys and not hidden:
            return _NEW_KEYLESS
        return Admission(Verdict.NEW, new_keys=tuple(new_keys), hidden=hidden)

    def admit(self, admission: Admission) -> Ticket | None:
        """Record the keys of an entry the topic accepted (after PIP-6 said it is new)."""
        if admission.verdict is not Verdict.NEW:
            raise ValueError(f"admit() of a {admission.verdict.value} entry")
        if not admission.new_keys and not admission.hidden:
            return None
        ticket = Ticket(admission.new_keys, admission.hidden, self._now())
        for _index, key in admission.new_keys:
            self._keys[key] = ticket
            self._order.append(key)
        return ticket

    def on_persisted(self, ticket: Ticket | None, position: Position) -> None:
        """The entry is durable at ``position`` (every entry, keyed or not, in log order)."""
        self._last_persisted_position = position
        self._entries_since_snapshot += 1
        if ticket is None:
            return
        bits = _stamp_bits(ticket.stamp)
        for index, key in ticket.keys:
            if self._keys.get(key) is ticket:
                self._keys[key] = _live_value(position, index, bits)
                self._durable += 1
        if ticket.hidden:
            self._hidden[position] = ticket.hidden
            self.hidden_messages += ticket.hidden.bit_count()
        self._evict_over_count()

    def on_write_failed(self, ticket: Ticket | None) -> None:
        """The entry was not stored: its keys leave the window (a retry is new)."""
        if ticket is None:
            return
        for _index, key in ticket.keys:
            if self._keys.get(key) is ticket:
                del self._keys[key]
                self._stale[key] = self._stale.get(key, 0) + 1

    # ------------------------------------------------------------------ expiry

    def _expire(self, now: float) -> None:
        # Exactly the documented test, on the exact stamp: a key stays while now - t < window.
        seconds = self._config.window_seconds
        order, known = self._order, self._keys
        while order:
            key = order[0]
            if self._skip_stale(key):
                continue
            found = known[key]
            if not isinstance(found, int) or now - _live_stamp(found) < seconds:
                break
            order.popleft()
            del known[key]
            self._durable -= 1
            self.expired += 1
        self._evict_over_count()

    def _evict_over_count(self) -> None:
        order, known = self._order, self._keys
        while self._durable > self._config.max_keys and order:
            key = order[0]
            if self._skip_stale(key):
                continue
            if known[key].__class__ is not int:
                break
            order.popleft()
            del known[key]
            self._durable -= 1
            self.evicted += 1

    def _skip_stale(self, key: str) -> bool:
        stale = self._stale.get(key)
        if not stale:
            return False
        # The front entry of a key removed out of order (its newest entry, if any, is later).
        self._order.popleft()
        if stale == 1:
            del self._stale[key]
        else:
            self._stale[key] = stale - 1
        return True

    # ------------------------------------------------------------------ hidden indexes

    def hidden_indexes(self, position: Position) -> int:
        """Bitmask of the batch indexes of ``position`` no consumer may see (0: none)."""
        return self._hidden.get(position, 0) if self._hidden else 0

    def forget_hidden_before(self, first: Position | None) -> None:
        """Entries before ``first`` were trimmed from the log: their masks are not needed."""
        if first is None:
            self._hidden.clear()
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
        return since > 0 and since >= max(min_entries, self._durable)

    def snapshot_records(self) -> tuple[list[tuple[str, int]], dict[Position, int]]:
        """The durable keys with their packed locations (`pack_location`, oldest first; stamps
        rounded up to the millisecond) and the hidden masks, describing the log up to
        `last_persisted_position`; keys in flight are after it and replayed if they land."""
        records: list[tuple[str, int]] = []
        last_bits, last_ms = -1, 0
        for key, found in self._keys.items():
            if isinstance(found, int):
                bits = found & _U64
                if bits != last_bits:  # keys of one entry (or one instant) share the stamp
                    last_bits, last_ms = bits, stamp_ms(_live_stamp(found))
                location = found >> _LIVE_STAMP_BITS
                records.append((key, (location << _STAMP_BITS) | last_ms))
        self._entries_since_snapshot = 0
        return records, dict(self._hidden)

    @classmethod
    def restore(
        cls,
        records: Iterable[tuple[str, int]],
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
            ms = packed & _STAMP_MASK
            location = packed >> _STAMP_BITS
            window._keys[key] = (location << _LIVE_STAMP_BITS) | _stamp_bits(ms / 1000)
            window._order.append(key)
            window._durable += 1
            last_stamp_ms = max(last_stamp_ms, ms)
        window._last_stamp = last_stamp_ms / 1000
        window._hidden = dict(hidden)
        window._last_persisted_position = snapshot_position
        return window

    def replay(
        self, position: Position, keys: Sequence[str | None], *, is_batch: bool, stamp: float
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
        seen_here: set[str] = set()
        known = self._keys
        bits = _stamp_bits(stamp)
        for index, key in enumerate(keys):
            if key is None:
                continue
            if is_batch and (key in known or key in seen_here):
                hidden |= 1 << index
                continue
            seen_here.add(key)
            if key in known:
                del known[key]
                self._stale[key] = self._stale.get(key, 0) + 1
                self._durable -= 1
            known[key] = _live_value(position, index, bits)
            self._order.append(key)
            self._durable += 1
        if hidden:
            self._hidden[position] = self._hidden.get(position, 0) | hidden

    def finish_replay(self) -> None:
        """After the replay: expire by time (stamps are real for snapshotted keys), or forget
        the keys if the window is off."""
        if self._config.enabled:
            self._expire(self._now())
        else:
            self._forget_durable_keys()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._keys)

    def original_of(self, key: str) -> tuple[Position, int] | None:
        """Where the durable copy of ``key`` is (position, batch index), if in the window."""
        found = self._keys.get(key)
        if isinstance(found, int):
            return _unpack_location_bits(found >> _LIVE_STAMP_BITS)
        return None

    def stats(self) -> dict[str, object]:
        return {
            "enabled": self._config.enabled,
            "windowSeconds": self._config.window_seconds,
            "maxKeys": self._config.max_keys,
            "keys": self._durable,
            "keysInFlight": len(self._keys) - self._durable,
            "duplicatesDropped": self.duplicates,
            "inFlightAnswers": self.in_flight_answers,
            "hiddenMessages": self.hidden_messages,
            "entriesWithHiddenIndexes": len(self._hidden),
            "expiredKeys": self.expired,
            "evictedKeys": self.evicted,
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
