# The idempotency window's digest store, compiled (issue #26; included by _speedups.pyx after
# _keys.pxi, whose _le64 and digest size it uses). broker/publish/idempotency_table.py is the
# reference: PyKeyTable.

from cpython.mem cimport PyMem_Realloc

cdef const char *_HEX = b"0123456789abcdef"

DEF _NO_LEDGER = -1
DEF _DEAD_LEDGER = -2
# Typed C constants, not DEFs: Cython types a DEF of 0xFFFFFFFF (above a C int) as a Python
# int, which turned every index probe and `seq % _CELL_MOD` into Python arithmetic (an object
# allocated per comparison: half the table's time, issue #26 item 6).
cdef extern from *:
    """
    #define MAGNETAR_KEY_CELL_EMPTY ((uint32_t)0xFFFFFFFFu)
    #define MAGNETAR_KEY_CELL_MOD ((uint64_t)0xFFFFFFFFu)
    """
    const uint32_t _EMPTY "MAGNETAR_KEY_CELL_EMPTY"
    const uint64_t _CELL_MOD "MAGNETAR_KEY_CELL_MOD"

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define magnetar_prefetch(address) __builtin_prefetch((const void *)(address))
    #else
    #define magnetar_prefetch(address) ((void)(address))
    #endif
    """
    void magnetar_prefetch(const void *address) noexcept nogil
DEF _MIN_CAPACITY = 16
# How far ahead of the head a pop prefetches the index cell and the ring (slots).
DEF _CELL_AHEAD = 8
DEF _RING_AHEAD = 64


cdef int64_t _stamp_ms(double stamp) noexcept nogil:
    """broker.publish.idempotency_window.stamp_ms: the stamp rounded up to the millisecond."""
    cdef int64_t ms = <int64_t>floor(stamp * 1000)
    while ms / 1000.0 < stamp:
        ms += 1
    while (ms - 1) / 1000.0 >= stamp:
        ms -= 1
    return ms


include "_key_snapshot.pxi"


cdef class KeyTable:
    """broker.publish.idempotency_table.PyKeyTable, compiled: the same ring and index, in
    memory from PyMem (so tracemalloc counts it)."""

    cdef uint8_t *_digests
    cdef double *_stamps
    cdef int64_t *_ledgers
    cdef int64_t *_entries
    cdef int32_t *_batch
    # Index cells: the low 32 bits of the digest's first word (its home, and a filter) above
    # ``seq mod _CELL_MOD``; a probe reads the ring only when those 32 bits match, and a
    # deletion's backward shift never does (the ring is a cache miss away: issue #26 item 6).
    cdef uint64_t *_cells
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _ncells
    cdef int64_t _head
    cdef int64_t _tail
    cdef Py_ssize_t _live
    cdef readonly Py_ssize_t durable
    cdef readonly Py_ssize_t expired  # durable slots that left by time, so far
    cdef readonly Py_ssize_t evicted  # ... and by count

    def __cinit__(self):
        self._capacity = 0
        self._ncells = 0
        self._allocate_ring(_MIN_CAPACITY)
        self._allocate_cells(2 * _MIN_CAPACITY)

    def __dealloc__(self):
        PyMem_Free(self._digests)
        PyMem_Free(self._stamps)
        PyMem_Free(self._ledgers)
        PyMem_Free(self._entries)
        PyMem_Free(self._batch)
        PyMem_Free(self._cells)

    def __len__(self):
        return self._live

    cdef int _allocate_ring(self, Py_ssize_t capacity) except -1:
        """New ring arrays of ``capacity`` slots holding the live range, oldest first."""
        if self._tail <= self._capacity and self._tail <= capacity:
            return self._reallocate_ring(capacity)
        cdef uint8_t *digests = <uint8_t *>PyMem_Malloc(capacity * _DIGEST)
        cdef double *stamps = <double *>PyMem_Malloc(capacity * sizeof(double))
        cdef int64_t *ledgers = <int64_t *>PyMem_Malloc(capacity * sizeof(int64_t))
        cdef int64_t *entries = <int64_t *>PyMem_Malloc(capacity * sizeof(int64_t))
        cdef int32_t *batch = <int32_t *>PyMem_Malloc(capacity * sizeof(int32_t))
        cdef int64_t seq
        cdef Py_ssize_t at, to, run
        if not digests or not stamps or not ledgers or not entries or not batch:
            PyMem_Free(digests)
            PyMem_Free(stamps)
            PyMem_Free(ledgers)
            PyMem_Free(entries)
            PyMem_Free(batch)
            raise MemoryError()
        seq = self._head
        while seq < self._tail:  # runs contiguous in both rings: at most three
            at = seq % self._capacity
            to = seq % capacity
            run = min(self._tail - seq, self._capacity - at, capacity - to)
            memcpy(digests + to * _DIGEST, self._digests + at * _DIGEST, run * _DIGEST)
            memcpy(stamps + to, self._stamps + at, run * sizeof(double))
            memcpy(ledgers + to, self._ledgers + at, run * sizeof(int64_t))
            memcpy(entries + to, self._entries + at, run * sizeof(int64_t))
            memcpy(batch + to, self._batch + at, run * sizeof(int32_t))
            seq += run
        PyMem_Free(self._digests)
        PyMem_Free(self._stamps)
        PyMem_Free(self._ledgers)
        PyMem_Free(self._entries)
        PyMem_Free(self._batch)
        self._digests, self._stamps, self._ledgers = digests, stamps, ledgers
        self._entries, self._batch = entries, batch
        self._capacity = capacity
        return 0

    cdef int _reallocate_ring(self, Py_ssize_t capacity) except -1:
        """`_allocate_ring` when every live slot keeps its place (``seq < capacity`` before and
        after: a window that has only grown so far): the arrays are resized in place, which
        for large ones moves pages instead of copying and faulting them in again."""
        cdef void *grown = PyMem_Realloc(self._digests, capacity * _DIGEST)
        if grown == NULL:
            raise MemoryError()  # the arrays resized so far are only larger: still valid
        self._digests = <uint8_t *>grown
        grown = PyMem_Realloc(self._stamps, capacity * sizeof(double))
        if grown == NULL:
            raise MemoryError()
        self._stamps = <double *>grown
        grown = PyMem_Realloc(self._ledgers, capacity * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        self._ledgers = <int64_t *>grown
        grown = PyMem_Realloc(self._entries, capacity * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        self._entries = <int64_t *>grown
        grown = PyMem_Realloc(self._batch, capacity * sizeof(int32_t))
        if grown == NULL:
            raise MemoryError()
        self._batch = <int32_t *>grown
        self._capacity = capacity
        return 0

    cdef int _allocate_cells(self, Py_ssize_t ncells) except -1:
        """A new index of ``ncells`` cells holding every cell of the old one. The old cells are
        read in order and each goes to its home under the new mask (its upper half holds the
        bits the home is made of), so the writes run in two ascending streams: re-inserting
        in slot order wrote to random cells, a cache miss per key at each growth of a large
        window, and read every digest from the ring (issue #26 item 6)."""
        cdef uint64_t *cells = <uint64_t *>PyMem_Malloc(ncells * sizeof(uint64_t))
        cdef uint64_t *old = self._cells
        cdef Py_ssize_t i, cell, mask = ncells - 1
        cdef uint64_t value
        if not cells:
            raise MemoryError()
        memset(cells, 0xFF, ncells * sizeof(uint64_t))  # every cell empty
        for i in range(self._ncells):
            value = old[i]
            if <uint32_t>value == _EMPTY:
                continue
            cell = <Py_ssize_t>((value >> 32) & <uint64_t>mask)
            while <uint32_t>cells[cell] != _EMPTY:
                cell = (cell + 1) & mask
            cells[cell] = value
        PyMem_Free(old)
        self._cells = cells
        self._ncells = ncells
        return 0

    cdef inline uint8_t *_digest_at(self, int64_t seq) noexcept:
        return self._digests + (seq % self._capacity) * _DIGEST

    cdef inline int64_t _seq_of(self, uint32_t value) noexcept:
        cdef uint64_t head_mod = <uint64_t>self._head % _CELL_MOD
        return self._head + <int64_t>((<uint64_t>value + _CELL_MOD - head_mod) % _CELL_MOD)

    cdef inline void _prefetch(self, const uint8_t *digest) noexcept:
        """Start loading ``digest``'s home cell (the lookup's likely cache miss) so that it
        overlaps work done before `_reserve_raw` (the key gate reads the clock meanwhile)."""
        magnetar_prefetch(&self._cells[self._home(digest)])

    cdef inline Py_ssize_t _home(self, const uint8_t *digest) noexcept:
        return <Py_ssize_t>(_le64(digest) & <uint64_t>(self._ncells - 1))

    @staticmethod
    cdef inline uint64_t _tag(const uint8_t *digest) noexcept:
        """The cell's upper half for ``digest`` (its home is these bits under the mask: the
        index never has 2**32 cells)."""
        return (_le64(digest) & 0xFFFFFFFFULL) << 32

    cdef int64_t _find(self, const uint8_t *digest) noexcept:
        cdef Py_ssize_t cell = self._home(digest), mask = self._ncells - 1
        cdef uint64_t value, tag = KeyTable._tag(digest)
        cdef int64_t seq
        while True:
            value = self._cells[cell]
            if <uint32_t>value == _EMPTY:
                return -1
            if (value & 0xFFFFFFFF00000000ULL) == tag:
                seq = self._seq_of(<uint32_t>value)
                if memcmp(self._digest_at(seq), digest, _DIGEST) == 0:
                    return seq
            cell = (cell + 1) & mask

    cdef void _insert(self, int64_t seq) noexcept:
        cdef const uint8_t *digest = self._digest_at(seq)
        cdef Py_ssize_t cell = self._home(digest), mask = self._ncells - 1
        while <uint32_t>self._cells[cell] != _EMPTY:
            cell = (cell + 1) & mask
        self._cells[cell] = KeyTable._tag(digest) | (<uint64_t>seq % _CELL_MOD)

    cdef void _delete(self, int64_t seq) noexcept:
        cdef const uint8_t *digest = self._digest_at(seq)
        cdef Py_ssize_t cell = self._home(digest), mask = self._ncells - 1
        cdef Py_ssize_t hole, home
        cdef uint64_t target = KeyTable._tag(digest) | (<uint64_t>seq % _CELL_MOD), value
        while self._cells[cell] != target:
            cell = (cell + 1) & mask
        hole = cell
        while True:
            cell = (cell + 1) & mask
            value = self._cells[cell]
            if <uint32_t>value == _EMPTY:
                break
            home = <Py_ssize_t>((value >> 32) & <uint64_t>mask)
            if ((cell - home) & mask) >= ((cell - hole) & mask):
                self._cells[hole] = value
                hole = cell
        self._cells[hole] = 0xFFFFFFFFFFFFFFFFULL

    cdef inline bint _valid(self, int64_t seq) noexcept:
        return self._head <= seq < self._tail

    def find(self, bytes digest not None):
        if PyBytes_GET_SIZE(digest) != _DIGEST:
            return -1
        return self._find(<const uint8_t *>PyBytes_AS_STRING(digest))

    def state(self, int64_t seq):
        cdef int64_t ledger = self._ledgers[seq % self._capacity]
        return 1 if ledger == _NO_LEDGER else 0 if ledger == _DEAD_LEDGER else 2

    def location(self, int64_t seq):
        cdef Py_ssize_t at = seq % self._capacity
        return self._ledgers[at], self._entries[at], self._batch[at]

    def stamp(self, int64_t seq):
        return self._stamps[seq % self._capacity]

    def digest(self, int64_t seq):
        return PyBytes_FromStringAndSize(<char *>self._digest_at(seq), _DIGEST)

    def durable_slots(self):
        cdef int64_t seq
        cdef list slots = []
        for seq in range(self._head, self._tail):
            if self._ledgers[seq % self._capacity] >= 0:
                slots.append(seq)
        return slots

    def snapshot_records(self):
        """[(digest, packed location)] of the durable slots, oldest first (the reference says
        how a location is packed)."""
        cdef list records = []
        cdef int64_t seq, ms = 0
        cdef double stamp, last_stamp = -1.0
        cdef Py_ssize_t at
        for seq in range(self._head, self._tail):
            at = seq % self._capacity
            if self._ledgers[at] < 0:
                continue
            stamp = self._stamps[at]
            if stamp != last_stamp:
                last_stamp, ms = stamp, _stamp_ms(stamp)
            location = ((<object>self._ledgers[at]) << 64) | self._entries[at]
            location = (location << 21) | (self._batch[at] + 1)
            records.append((self.digest(seq), (location << 45) | ms))
        return records

    def snapshot_copy(self):
        """PyKeyTable.snapshot_copy: the durable slots, oldest first, copied (the ring's columns,
        ~44 B a key: a millisecond or so at 100k keys, on the loop) for `KeySnapshot.json` to
        render later, in the cursor write's thread and without the GIL (issue #26 item 6)."""
        cdef KeySnapshot copy = KeySnapshot.__new__(KeySnapshot)
        cdef int64_t seq
        cdef Py_ssize_t at, n = 0
        copy._allocate(self.durable)
        for seq in range(self._head, self._tail):
            at = seq % self._capacity
            if self._ledgers[at] < 0:
                continue
            memcpy(copy._digests + n * _DIGEST, self._digest_at(seq), _DIGEST)
            copy._stamps[n] = self._stamps[at]
            copy._ledgers[n] = self._ledgers[at]
            copy._entries[n] = self._entries[at]
            copy._batch[n] = self._batch[at]
            n += 1
        copy._count = n
        return copy

    def snapshot_json(self, str prefix not None):
        """PyKeyTable.snapshot_json: `snapshot_copy` rendered at once."""
        return self.snapshot_copy().json(prefix)

    def add(self, bytes digest not None, double stamp):
        if PyBytes_GET_SIZE(digest) != _DIGEST:
            raise ValueError(f"a key digest has {_DIGEST} bytes, not {len(digest)}")
        return self._add(digest, stamp)

    cdef int64_t _add(self, bytes digest, double stamp) except -1:
        return self._add_raw(<const uint8_t *>PyBytes_AS_STRING(digest), stamp)

    cdef int64_t _add_raw(self, const uint8_t *digest, double stamp) except -1:
        cdef int64_t seq
        cdef Py_ssize_t at
        if self._tail - self._head == self._capacity:
            self._allocate_ring(self._capacity + self._capacity // 2 + _MIN_CAPACITY)
        if 2 * (self._live + 1) > self._ncells:
            self._allocate_cells(2 * self._ncells)
        seq = self._tail
        self._tail += 1
        at = seq % self._capacity
        memcpy(self._digests + at * _DIGEST, digest, _DIGEST)
        self._stamps[at] = stamp
        self._ledgers[at] = _NO_LEDGER
        self._entries[at] = 0
        self._batch[at] = 0
        self._insert(seq)
        self._live += 1
        return seq

    def persist(self, int64_t seq, int64_t ledger_id, int64_t entry_id, int32_t batch_index):
        return self._persist(seq, ledger_id, entry_id, batch_index)

    cdef bint _persist(self, int64_t seq, int64_t ledger_id, int64_t entry_id,
                       int32_t batch_index) noexcept:
        cdef Py_ssize_t at
        if not self._valid(seq):
            return False
        at = seq % self._capacity
        if self._ledgers[at] != _NO_LEDGER:
            return False
        self._ledgers[at] = ledger_id
        self._entries[at] = entry_id
        self._batch[at] = batch_index
        self.durable += 1
        return True

    def discard(self, int64_t seq):
        cdef Py_ssize_t at
        cdef int64_t ledger
        if not self._valid(seq):
            return
        at = seq % self._capacity
        ledger = self._ledgers[at]
        if ledger == _DEAD_LEDGER:
            return
        self._delete(seq)
        self._ledgers[at] = _DEAD_LEDGER
        self._live -= 1
        if ledger >= 0:
            self.durable -= 1

    cdef void _pop_head(self) noexcept:
        cdef int64_t ahead = self._head + _CELL_AHEAD
        # A full window evicts a slot per key accepted, and each deletion's cell is a cache
        # miss (the index is ~2 MB at 100k keys): load the cell of the slot _CELL_AHEAD places
        # on now, and the ring's lines further on, so that the pops to come find them loaded
        # (the key gate's loop does other work between them; issue #26 item 6).
        if ahead < self._tail:
            self._prefetch(self._digest_at(ahead))
        ahead += _RING_AHEAD - _CELL_AHEAD
        if ahead < self._tail:
            magnetar_prefetch(self._digest_at(ahead))
            magnetar_prefetch(&self._ledgers[ahead % self._capacity])
            magnetar_prefetch(&self._stamps[ahead % self._capacity])
        self._delete(self._head)
        self._head += 1
        self._live -= 1
        self.durable -= 1

    def expire_older(self, double now, double seconds):
        return self._expire_older(now, seconds)

    def evict_over(self, Py_ssize_t max_keys):
        return self._evict_over(max_keys)

    cdef Py_ssize_t _expire_older(self, double now, double seconds) except -1:
        cdef Py_ssize_t removed = 0, at
        cdef int64_t ledger
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

    cdef Py_ssize_t _evict_over(self, Py_ssize_t max_keys) except -1:
        cdef Py_ssize_t removed = 0, at
        cdef int64_t ledger
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

    def reserve(self, bytes digest not None, double now, double seconds, Py_ssize_t max_keys):
        """PyKeyTable.reserve: expire, evict, find and add in one call (the new slot, or
        ``-1 - seq`` of the live slot holding ``digest``)."""
        if PyBytes_GET_SIZE(digest) != _DIGEST:
            raise ValueError(f"a key digest has {_DIGEST} bytes, not {len(digest)}")
        return self._reserve_raw(<const uint8_t *>PyBytes_AS_STRING(digest), now, seconds,
                                 max_keys)

    cdef int64_t _reserve_raw(self, const uint8_t *digest, double now, double seconds,
                              Py_ssize_t max_keys) except? -1:
        """`reserve` of the 16 bytes at ``digest`` (the key gate's call, no bytes object)."""
        cdef int64_t found
        self._expire_older(now, seconds)
        if self.durable > max_keys:
            self._evict_over(max_keys)
        found = self._find(digest)
        if found >= 0:
            return -1 - found
        return self._add_raw(digest, now)

    def clear_durable(self):
        for seq in self.durable_slots():
            self.discard(seq)

    cdef int _maybe_shrink(self) except -1:
        cdef Py_ssize_t used = self._tail - self._head
        if self._capacity > 4 * _MIN_CAPACITY and 4 * used < self._capacity:
            self._allocate_ring(max(_MIN_CAPACITY, used + used // 4 + _MIN_CAPACITY))
            if self._ncells > 4 * _MIN_CAPACITY and 8 * self._live < self._ncells:
                self._allocate_cells(self._ncells // 2)
        return 0
