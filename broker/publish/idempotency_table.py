"""The idempotency window's key store: digests in acceptance order, in flat arrays (issue #26).

A dict of key strings cost 172 B per key (the string, the dict slot, a packed int per value).
Here a key costs its 16-byte digest (``protocol.idempotency_scan.key_digest``), its stamp (a
double), its location (ledger id, entry id, batch index: 8 + 8 + 4 bytes) in a *ring* of slots
in acceptance order, plus an open-addressing *index* (at most half full) from digest to slot:
44 B of ring per key; the ring grows by half (copying runs with ``memcpy``). This reference's
index cells are 4 bytes (8-16 B per key). The compiled table's are 8 bytes (16-32 B per key):
each holds 32 bits of the digest beside the slot number, so a probe reads the ring (a cache
miss away on the SEND path) only on a likely match, and a deletion never does (issue #26 item
6); with its slack a key costs 60-98 B there (70 B measured at 1M keys, 74 B at 200k).

* Slots are numbered by a sequence number ``seq`` that grows by one per key added; the ring
  holds ``head <= seq < tail`` at ``seq % capacity``. Keys leave from the head (time and count
  expiry), so the window is always a suffix of the accepted keys, as before.
* A slot is *in flight* (added, location not known yet), *durable* (persisted: location set)
  or *dead* (removed out of order: a failed write, or a key replayed again; skipped at the head).
* The index is linear probing on the digest's first 8 bytes, cells holding ``seq mod (2**32-1)``
  (all live slots lie within 2**32-1 of ``head``, so the full ``seq`` is recovered), deletion by
  backward shift (no tombstones). The full digest is compared in the ring.

``PyKeyTable`` is the pure-Python reference; ``KeyTable`` is the compiled one
(``protocol/_key_table.pxi``) when the extension is in use, with the same methods and answers.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

from broker.storage import Position
from protocol._accel import speedups
from protocol.idempotency_scan import DIGEST_SIZE

__all__ = [
    "DEAD",
    "DURABLE",
    "IN_FLIGHT",
    "STAMP_MASK",
    "KeyTable",
    "PyKeySnapshot",
    "PyKeyTable",
    "pack_location",
    "stamp_ms",
    "unpack_location",
]

DEAD, IN_FLIGHT, DURABLE = 0, 1, 2
_NO_LEDGER, _DEAD_LEDGER = -1, -2  # the ledger-id column doubles as the slot state
_EMPTY = 0xFFFF_FFFF
_CELL_MOD = 0xFFFF_FFFF  # cells hold seq mod this (so never _EMPTY)
_MIN_CAPACITY = 16


class PyKeySnapshot:
    """The durable slots of a table at one instant (`PyKeyTable.snapshot_copy`): the records
    of `PyKeyTable.snapshot_records`."""

    __slots__ = ("_records",)

    def __init__(self, records: list[tuple[bytes, int]]) -> None:
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def json(self, prefix: str) -> bytes:
        """``{prefix + digest.hex(): packed}`` (the snapshot's key properties) as JSON text,
        the members ``json.dumps`` writes between its braces (``"<name>":<packed>`` joined by
        commas): the cursor file splices them into its document instead of encoding the
        window's keys one by one (issue #26 item 6).

        Raises:
            ValueError: ``prefix`` is not written as is in JSON (printable ASCII but ``"``
                and ``\\``), or is longer than 64 characters.
        """
        if not _json_name_prefix(prefix):
            raise ValueError(f"{prefix!r} is no JSON name prefix written as is")
        return ",".join(
            f'"{prefix}{digest.hex()}":{packed}' for digest, packed in self._records
        ).encode()


def _json_name_prefix(prefix: str) -> bool:
    """Whether ``json.dumps`` writes ``prefix`` in a name unchanged (no escape)."""
    return len(prefix) <= 64 and all(" " <= c <= "~" and c not in '"\\' for c in prefix)


class PyKeyTable:
    """Digest -> slot, slots in acceptance order (module docstring)."""

    def __init__(self) -> None:
        self._capacity = _MIN_CAPACITY
        self._digests = bytearray(DIGEST_SIZE * _MIN_CAPACITY)
        self._stamps = array("d", bytes(8 * _MIN_CAPACITY))
        self._ledgers = array("q", bytes(8 * _MIN_CAPACITY))
        self._entries = array("q", bytes(8 * _MIN_CAPACITY))
        self._batch = array("i", bytes(4 * _MIN_CAPACITY))
        self._head = self._tail = 0
        self._live = 0  # slots in the index (in flight + durable)
        self.durable = 0
        #: Durable slots that left from the head so far, by time and by count (the window's
        #: statistics: counted here so that `reserve` answers in one call).
        self.expired = 0
        self.evicted = 0
        self._cells = array("I", [_EMPTY]) * (2 * _MIN_CAPACITY)

    def __len__(self) -> int:
        return self._live

    # ------------------------------------------------------------------ queries

    def find(self, digest: bytes) -> int:
        """The slot holding ``digest``, or -1."""
        cells, mask = self._cells, len(self._cells) - 1
        cell = int.from_bytes(digest[:8], "little") & mask
        while True:
            value = cells[cell]
            if value == _EMPTY:
                return -1
            seq = self._seq_of(value)
            at = (seq % self._capacity) * DIGEST_SIZE
            if self._digests[at : at + DIGEST_SIZE] == digest:
                return seq
            cell = (cell + 1) & mask

    def state(self, seq: int) -> int:
        ledger = self._ledgers[seq % self._capacity]
        return IN_FLIGHT if ledger == _NO_LEDGER else DEAD if ledger == _DEAD_LEDGER else DURABLE

    def location(self, seq: int) -> tuple[int, int, int]:
        """(ledger id, entry id, batch index) of a durable slot."""
        at = seq % self._capacity
        return self._ledgers[at], self._entries[at], self._batch[at]

    def stamp(self, seq: int) -> float:
        return self._stamps[seq % self._capacity]

    def digest(self, seq: int) -> bytes:
        at = (seq % self._capacity) * DIGEST_SIZE
        return bytes(self._digests[at : at + DIGEST_SIZE])

    def durable_slots(self) -> Iterator[int]:
        """The durable slots, oldest first."""
        for seq in range(self._head, self._tail):
            if self.state(seq) == DURABLE:
                yield seq

    def snapshot_records(self) -> list[tuple[bytes, int]]:
        """(digest, `pack_location` value) of the durable slots, oldest first: the location
        ``((ledger_id << 64 | entry_id) << 21 | batch_index + 1) << 45 | stamp_ms`` with the
        stamp rounded up to the millisecond (`stamp_ms`)."""
        records: list[tuple[bytes, int]] = []
        last_stamp, ms = -1.0, 0
        for seq in self.durable_slots():
            stamp = self.stamp(seq)
            if stamp != last_stamp:  # keys of one entry (or one instant) share the stamp
                last_stamp, ms = stamp, stamp_ms(stamp)
            ledger_id, entry_id, index = self.location(seq)
            location = (((ledger_id << 64) | entry_id) << 21) | (index + 1)
            records.append((self.digest(seq), (location << 45) | ms))
        return records

    def snapshot_copy(self) -> PyKeySnapshot:
        """The durable slots as they are now, for `PyKeySnapshot.json` to render later: the
        compiled table copies its columns (on the loop, ~1 ms at 100k keys) and renders them
        in the cursor write's thread without the GIL (issue #26 item 6)."""
        return PyKeySnapshot(self.snapshot_records())

    def snapshot_json(self, prefix: str) -> bytes:
        """`snapshot_copy` rendered at once (`PyKeySnapshot.json`)."""
        return self.snapshot_copy().json(prefix)

    # ------------------------------------------------------------------ changes

    def reserve(self, digest: bytes, now: float, seconds: float, max_keys: int) -> int:
        """The SEND path's one call for a single key (issue #26): expire by time
        (`expire_older`) and by count (`evict_over` past ``max_keys``), then look ``digest``
        up; if absent, `add` it in flight stamped ``now``.

        Returns the new slot (``>= 0``), or ``-1 - seq`` when ``digest`` is already live at
        slot ``seq`` (in flight or durable: `state` tells).
        """
        self.expire_older(now, seconds)
        if self.durable > max_keys:
            self.evict_over(max_keys)
        found = self.find(digest)
        if found >= 0:
            return -1 - found
        return self.add(digest, now)

    def add(self, digest: bytes, stamp: float) -> int:
        """A new in-flight slot for ``digest`` (not in the table: the caller checked)."""
        if len(digest) != DIGEST_SIZE:
            raise ValueError(f"a key digest has {DIGEST_SIZE} bytes, not {len(digest)}")
        if self._tail - self._head == self._capacity:
            self._resize(self._capacity + self._capacity // 2 + _MIN_CAPACITY)
        if 2 * (self._live + 1) > len(self._cells):
            self._reindex(2 * len(self._cells))
        seq = self._tail
        self._tail += 1
        at = seq % self._capacity
        self._digests[at * DIGEST_SIZE : (at + 1) * DIGEST_SIZE] = digest
        self._stamps[at] = stamp
        self._ledgers[at] = _NO_LEDGER
        self._entries[at] = 0
        self._batch[at] = 0
        self._insert(digest, seq)
        self._live += 1
        return seq

    def persist(self, seq: int, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """The in-flight slot ``seq`` is durable at that location; False if it is not in flight
        (removed meanwhile)."""
        if not self._head <= seq < self._tail or self.state(seq) != IN_FLIGHT:
            return False
        at = seq % self._capacity
        self._ledgers[at] = ledger_id
        self._entries[at] = entry_id
        self._batch[at] = batch_index
        self.durable += 1
        return True

    def discard(self, seq: int) -> None:
        """Remove a live slot out of order (it stays in the ring as dead until the head)."""
        state = self.state(seq)
        if state == DEAD:
            return
        self._delete(self.digest(seq), seq)
        self._ledgers[seq % self._capacity] = _DEAD_LEDGER
        self._live -= 1
        if state == DURABLE:
            self.durable -= 1

    def expire_older(self, now: float, seconds: float) -> int:
        """Remove durable slots from the head while ``now - stamp >= seconds`` (the window's
        exact edge); stops at the first in-flight slot. Returns how many left."""
        removed = 0
        while self._head < self._tail:
            at = self._head % self._capacity
            ledger = self._ledgers[at]
            if ledger == _DEAD_LEDGER:
                self._head += 1
                continue
            if ledger == _NO_LEDGER or now - self._stamps[at] < seconds:
                break
            self._pop_head()
            removed += 1
        self._maybe_shrink()
        self.expired += removed
        return removed

    def evict_over(self, max_keys: int) -> int:
        """Remove durable slots from the head while more than ``max_keys`` are durable; stops
        at the first in-flight slot. Returns how many left."""
        removed = 0
        while self.durable > max_keys and self._head < self._tail:
            at = self._head % self._capacity
            ledger = self._ledgers[at]
            if ledger == _DEAD_LEDGER:
                self._head += 1
                continue
            if ledger == _NO_LEDGER:
                break
            self._pop_head()
            removed += 1
        self._maybe_shrink()
        self.evicted += removed
        return removed

    def clear_durable(self) -> None:
        """Forget every durable slot; in-flight slots stay (a window turned off)."""
        for seq in list(self.durable_slots()):
            self.discard(seq)

    # ------------------------------------------------------------------ internals

    def _pop_head(self) -> None:
        seq = self._head
        self._delete(self.digest(seq), seq)
        self._head += 1
        self._live -= 1
        self.durable -= 1

    def _seq_of(self, value: int) -> int:
        return self._head + (value - self._head % _CELL_MOD) % _CELL_MOD

    def _insert(self, digest: bytes, seq: int) -> None:
        cells, mask = self._cells, len(self._cells) - 1
        cell = int.from_bytes(digest[:8], "little") & mask
        while cells[cell] != _EMPTY:
            cell = (cell + 1) & mask
        cells[cell] = seq % _CELL_MOD

    def _delete(self, digest: bytes, seq: int) -> None:
        cells, mask = self._cells, len(self._cells) - 1
        cell = int.from_bytes(digest[:8], "little") & mask
        target = seq % _CELL_MOD
        while cells[cell] != target:
            cell = (cell + 1) & mask
        # Backward shift: pull later cells of the probe run into the hole when their home
        # cell allows, so lookups never need tombstones.
        hole = cell
        while True:
            cell = (cell + 1) & mask
            value = cells[cell]
            if value == _EMPTY:
                break
            home = int.from_bytes(self._cell_digest(value)[:8], "little") & mask
            if (cell - home) & mask >= (cell - hole) & mask:
                cells[hole] = value
                hole = cell
        cells[hole] = _EMPTY

    def _cell_digest(self, value: int) -> bytes:
        at = (self._seq_of(value) % self._capacity) * DIGEST_SIZE
        return bytes(self._digests[at : at + DIGEST_SIZE])

    def _maybe_shrink(self) -> None:
        used = self._tail - self._head
        if self._capacity > 4 * _MIN_CAPACITY and 4 * used < self._capacity:
            self._resize(max(_MIN_CAPACITY, used + used // 4 + _MIN_CAPACITY))
            if len(self._cells) > 4 * _MIN_CAPACITY and 8 * self._live < len(self._cells):
                self._reindex(len(self._cells) // 2)

    def _resize(self, capacity: int) -> None:
        """Copy the ring, oldest first, into arrays of ``capacity`` slots (cells keep ``seq``)."""
        old = self._capacity
        order = [seq % old for seq in range(self._head, self._tail)]
        digests = bytearray(DIGEST_SIZE * capacity)
        stamps = array("d", bytes(8 * capacity))
        ledgers = array("q", bytes(8 * capacity))
        entries = array("q", bytes(8 * capacity))
        batch = array("i", bytes(4 * capacity))
        for offset, at in enumerate(order):
            to = (self._head + offset) % capacity
            digests[to * DIGEST_SIZE : (to + 1) * DIGEST_SIZE] = self._digests[
                at * DIGEST_SIZE : (at + 1) * DIGEST_SIZE
            ]
            stamps[to] = self._stamps[at]
            ledgers[to] = self._ledgers[at]
            entries[to] = self._entries[at]
            batch[to] = self._batch[at]
        self._capacity = capacity
        self._digests, self._stamps, self._ledgers = digests, stamps, ledgers
        self._entries, self._batch = entries, batch

    def _reindex(self, cells: int) -> None:
        self._cells = array("I", [_EMPTY]) * cells
        for seq in range(self._head, self._tail):
            if self.state(seq) != DEAD:
                self._insert(self.digest(seq), seq)


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


# What the snapshot stores for a durable key (one int):
#   ((ledger_id << 64 | entry_id) << 21 | batch_index + 1) << 45 | stamp_ms
# Keys are stored in acceptance order, so sorting packed values restores that order.
_STAMP_BITS = 45
_INDEX_BITS = 21
STAMP_MASK = (1 << _STAMP_BITS) - 1
_INDEX_MASK = (1 << _INDEX_BITS) - 1
_U64 = (1 << 64) - 1


def pack_location(position: Position, batch_index: int, stamp: float) -> int:
    """A snapshotted key's value: where its message is and when it was accepted (seconds,
    rounded up to the millisecond: `stamp_ms`)."""
    location = (position.ledger_id << 64) | (position.entry_id & _U64)
    location = (location << _INDEX_BITS) | (batch_index + 1)
    return (location << _STAMP_BITS) | stamp_ms(stamp)


def unpack_location(packed: int) -> tuple[Position, int, float]:
    """Inverse of `pack_location` (the stamp to the millisecond)."""
    stamp = (packed & STAMP_MASK) / 1000
    location = packed >> _STAMP_BITS
    batch_index = (location & _INDEX_MASK) - 1
    location >>= _INDEX_BITS
    return Position(location >> 64, location & _U64), batch_index, stamp


def _choose() -> type[PyKeyTable]:
    compiled = speedups()
    table: type[PyKeyTable] | None = getattr(compiled, "KeyTable", None)
    return table if table is not None else PyKeyTable


KeyTable = _choose()
