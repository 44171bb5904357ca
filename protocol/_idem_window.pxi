# The idempotency window's per-SEND step, compiled (issue #26, item 6; included by
# _speedups.pyx after _keys.pxi and _key_table.pxi, whose walk helpers, BLAKE2b and table it
# uses). broker/publish/idempotency_gate.py is the reference: PyKeyGate.

from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

import time as _time

cdef KeyTable _SHARED_EMPTY_TABLE = KeyTable()
cdef object _TIME_TIME = _time.time


cdef double _wall_clock() noexcept:
    """``time.time()`` without the call: the same clock (CLOCK_REALTIME) and the same
    conversion (CPython's nanoseconds to seconds as a double)."""
    cdef timespec now
    cdef int64_t ns
    clock_gettime(CLOCK_REALTIME, &now)
    ns = <int64_t>now.tv_sec * 1000000000 + now.tv_nsec
    if ns % 1000000000 == 0:
        return <double>(ns // 1000000000)
    return <double>ns / 1e9


cdef int _quick_digest(bytes entry, Py_ssize_t max_header_bytes, Py_ssize_t max_properties,
                       uint8_t *out) except -2:
    """quick_key without objects: 0 where it answers False, -1 where it answers None, 1 where
    it answers a digest (written to ``out``). The common layouts are walked here; anything the
    walk does not take (malformed-looking bytes) asks quick_key itself, so the answers are its
    answers."""
    cdef Py_ssize_t length = PyBytes_GET_SIZE(entry), size, field_size
    cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(entry)
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef int64_t num_messages = -1, chunks = 0
    cdef bint encrypted = False
    cdef _KeyProps props
    if length < 4:
        return 0
    size = <Py_ssize_t>_be32(start)
    if memmem(start, length, "magnetar.idempotency-key", 24) == NULL:
        if size > length - 4:
            size = length - 4
        return 0 if memchr(start + 4, 0x40, size) == NULL else -1
    if size > max_header_bytes or size > length - 4:
        return -1
    props.count = 0
    props.found = False
    props.value = NULL
    props.value_size = 0
    p = start + 4
    end = p + size
    while p < end:  # scan_key_metadata's walk, keeping what quick_key's answer depends on
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return _quick_digest_of_reference(entry, max_header_bytes, max_properties, out)
        if wire == 2 and (field == 4 or field == 13):
            p = _length(p, end, &field_size)
            if p == NULL:
                return _quick_digest_of_reference(entry, max_header_bytes, max_properties, out)
            if field == 4:
                if not _key_value(p, p + field_size, &props):
                    return _quick_digest_of_reference(
                        entry, max_header_bytes, max_properties, out
                    )
            else:
                encrypted = True
            p += field_size
        elif wire == 0 and (field == 8 or field == 9 or field == 11 or field == 27):
            p = _varint(p, end, &value)
            if p == NULL:
                return _quick_digest_of_reference(entry, max_header_bytes, max_properties, out)
            if field == 11:
                num_messages = _as_int32(value)
            elif field == 27:
                chunks = _as_int32(value)
        else:
            p = _skip(p, end, wire)
            if p == NULL:
                return _quick_digest_of_reference(entry, max_header_bytes, max_properties, out)
    if chunks > 1 or encrypted or num_messages >= 0:
        return -1  # chunked or encrypted: no key read; a batch: the full check
    if not props.found or props.value_size == 0 or props.count > max_properties:
        return -1  # no key (the name is elsewhere), or beyond the properties' bound
    _blake2b_128(props.value, props.value_size, out)
    return 1


cdef int _quick_digest_of_reference(bytes entry, Py_ssize_t max_header_bytes,
                                    Py_ssize_t max_properties, uint8_t *out) except -2:
    """_quick_digest's answer from quick_key (bytes the fast walk does not take)."""
    answer = quick_key(entry, max_header_bytes, max_properties)
    if answer is False:
        return 0
    if type(answer) is not bytes:
        return -1
    memcpy(out, PyBytes_AS_STRING(answer), _DIGEST)
    return 1


cdef class KeyGate:
    """broker.publish.idempotency_gate.PyKeyGate, compiled: the base of the window."""

    cdef public object _clock
    cdef public double _last_stamp
    cdef public Py_ssize_t _max_keys
    cdef public double _seconds
    cdef public bint _shared
    cdef public object _table

    def _init_gate(self, clock, double seconds, Py_ssize_t max_keys):
        self._clock = clock
        self._last_stamp = 0.0
        self._seconds = seconds
        self._max_keys = max_keys
        self._table = _SHARED_EMPTY_TABLE
        self._shared = True

    def _writable_table(self):
        if self._shared:
            self._table = KeyTable()
            self._shared = False
        return self._table

    cdef object _reserve(self, const uint8_t *digest):
        cdef double now
        table = self._table
        if type(table) is KeyTable and not self._shared:
            (<KeyTable>table)._prefetch(digest)  # its home cell loads while the clock is read
        if self._clock is _TIME_TIME:  # the broker's clock: read here, not called
            now = _wall_clock()
        else:
            now = self._clock()
        if now < self._last_stamp:  # stamps never go backwards
            now = self._last_stamp
        self._last_stamp = now
        if self._shared:
            self._writable_table()
        table = self._table
        if type(table) is KeyTable:
            return (<KeyTable>table)._reserve_raw(digest, now, self._seconds, self._max_keys)
        return table.reserve(
            PyBytes_FromStringAndSize(<const char *>digest, _DIGEST), now, self._seconds,
            self._max_keys,
        )

    def reserve_key(self, bytes digest not None):
        if PyBytes_GET_SIZE(digest) != _DIGEST:
            raise ValueError(f"a key digest has {_DIGEST} bytes, not {len(digest)}")
        return self._reserve(<const uint8_t *>PyBytes_AS_STRING(digest))

    def reserve_entry(self, bytes entry not None, Py_ssize_t max_header_bytes,
                      Py_ssize_t max_properties):
        cdef uint8_t digest[_DIGEST]
        cdef int kind = _quick_digest(entry, max_header_bytes, max_properties, digest)
        if kind == 0:
            return False
        if kind < 0:
            return None
        return self._reserve(digest)

    def persist_group(self, list group not None):
        """PyKeyGate.persist_group: a durable group's keys, one call per group. A position is
        read as the tuple it is (``Position`` is a NamedTuple): indexing a tuple *subclass*
        through the generic path calls its ``__getitem__`` (a method lookup and an argument
        tuple per index, ~0.1 us a key, issue #26 item 6)."""
        cdef Py_ssize_t max_keys = self._max_keys
        cdef int64_t ledger_id, entry_id
        cdef KeyTable keys = self._table if type(self._table) is KeyTable else None
        table = self._table
        for write in group:
            if type(write) is Publication:
                ticket = (<Publication>write).ticket
                if ticket is None:
                    continue
                position = (<Publication>write).position
            else:
                ticket = write.ticket
                if ticket is None:
                    continue
                position = write.position
            if type(ticket) is not int:
                self.on_keys_persisted(ticket, position)
                continue
            if PyTuple_Check(position) and PyTuple_GET_SIZE(position) == 2:
                ledger_id = <object>PyTuple_GET_ITEM(position, 0)
                entry_id = <object>PyTuple_GET_ITEM(position, 1)
            else:
                ledger_id = position[0]
                entry_id = position[1]
            if keys is not None:
                keys._persist(ticket, ledger_id, entry_id, 0)
                if keys.durable > max_keys:
                    keys._evict_over(max_keys)
            else:
                table.persist(ticket, ledger_id, entry_id, 0)
                if table.durable > max_keys:
                    table.evict_over(max_keys)
