# The idempotency window's snapshot as JSON text, compiled (issue #26 item 6; included by
# _key_table.pxi, whose _stamp_ms and _HEX it uses). A snapshot of a full window is ~100k
# cursor properties ``"d:<digest hex>":<packed location>``; made as a dict on the loop and
# encoded by json.dumps in the cursor write's thread, holding the GIL, it cost ~27 ms of the
# loop and ~50-100 ms of the GIL per snapshot. Here the loop only copies the durable slots
# (``KeyTable.snapshot_copy``), and `KeySnapshot.json` renders them, without the GIL, into the
# bytes json.dumps would write between the braces; the cursor file splices them into its
# document. broker/publish/idempotency_table.py is the reference: PyKeySnapshot.

from cpython.ref cimport PyObject, Py_XDECREF

cdef bytes _DIGIT_PAIRS_BYTES = b"".join(b"%02d" % pair for pair in range(100))
cdef const char *_DIGIT_PAIRS = _DIGIT_PAIRS_BYTES

# A bytes object written in place and then cut to what was written: rendering a snapshot into
# one made at its upper bound, then copying the used part out, touched its ~8 MB twice (on the
# loop). _PyBytes_Resize wants the only reference, so the object is held as a raw pointer.
cdef extern from *:
    """
    static PyObject *magnetar_bytes_cut(PyObject *bytes, Py_ssize_t size) {
        if (_PyBytes_Resize(&bytes, size) < 0)
            return NULL;  /* bytes was released */
        return bytes;
    }
    """
    PyObject *magnetar_bytes_new "PyBytes_FromStringAndSize"(const char *data,
                                                             Py_ssize_t size) except NULL
    object magnetar_bytes_cut(PyObject *bytes, Py_ssize_t size)

# The longest JSON text of a packed location: a value below 2**224 (see _put_location) has at
# most 68 digits; the reference's arithmetic for values outside the fields' widths, a sign more.
DEF _MAX_VALUE_TEXT = 72


cdef inline char *_put_nine(char *out, uint32_t chunk) noexcept nogil:
    """``chunk`` (below 10**9) as nine digits, zero-padded; returns the end."""
    cdef int i
    out[8] = <char>(48 + chunk % 10)
    chunk //= 10
    for i in range(3, -1, -1):
        memcpy(out + 2 * i, _DIGIT_PAIRS + 2 * (chunk % 100), 2)
        chunk //= 100
    return out + 9


cdef char *_put_decimal(char *out, uint32_t *limbs, int count) noexcept nogil:
    """The number whose 32-bit limbs, least significant first, are ``limbs[:count]`` (they are
    consumed), in decimal: nine digits at a time, each a division of the limbs by 10**9 (by a
    constant: a multiplication, no divide instruction)."""
    cdef uint32_t chunks[8]  # 10**72 > 2**(32 * 7)
    cdef char first[9]
    cdef int n = count, chunk_count = 0, i, skip = 0
    cdef uint64_t current, remainder
    while n > 0 and limbs[n - 1] == 0:
        n -= 1
    if n == 0:
        out[0] = b"0"
        return out + 1
    while n > 0:
        remainder = 0
        for i in range(n - 1, -1, -1):
            current = (remainder << 32) | limbs[i]
            limbs[i] = <uint32_t>(current // 1000000000)
            remainder = current % 1000000000
        chunks[chunk_count] = <uint32_t>remainder
        chunk_count += 1
        while n > 0 and limbs[n - 1] == 0:
            n -= 1
    _put_nine(first, chunks[chunk_count - 1])
    while first[skip] == b"0":  # the leading chunk is not zero: a digit remains
        skip += 1
    memcpy(out, first + skip, 9 - skip)
    out += 9 - skip
    for i in range(chunk_count - 2, -1, -1):
        out = _put_nine(out, chunks[i])
    return out


cdef inline char *_put_location(char *out, int64_t ledger, int64_t entry, int32_t index,
                                int64_t ms) noexcept nogil:
    """``ledger << 130 | entry << 66 | (index + 1) << 45 | ms`` in decimal, for fields within
    their widths (the caller checks: ledger and entry >= 0, index + 1 below 2**21, ms below
    2**45); the value is below 2**193."""
    cdef uint32_t limbs[7]
    cdef uint64_t low = <uint64_t>ms | (<uint64_t>(index + 1) << 45)
    cdef uint64_t mid = (<uint64_t>(index + 1) >> 19) | (<uint64_t>entry << 2)
    cdef uint64_t high = (<uint64_t>entry >> 62) | (<uint64_t>ledger << 2)
    limbs[0] = <uint32_t>low
    limbs[1] = <uint32_t>(low >> 32)
    limbs[2] = <uint32_t>mid
    limbs[3] = <uint32_t>(mid >> 32)
    limbs[4] = <uint32_t>high
    limbs[5] = <uint32_t>(high >> 32)
    limbs[6] = <uint32_t>(<uint64_t>ledger >> 62)
    return _put_decimal(out, limbs, 7)


cdef bytes _json_name_prefix(str prefix):
    """``prefix`` as bytes, if ``json.dumps`` writes it unchanged (printable ASCII but for the
    quote and the backslash): the rendered names are not escaped."""
    cdef bytes head
    try:
        head = prefix.encode("ascii")
    except UnicodeEncodeError:
        head = None
    if (head is None or PyBytes_GET_SIZE(head) > 64
            or any(c < 0x20 or c > 0x7E or c in b'"\\' for c in head)):
        raise ValueError(f"{prefix!r} is no JSON name prefix written as is")
    return head


cdef char *_put_reference_location(char *out, int64_t ledger, int64_t entry, int32_t index,
                                   int64_t ms) except NULL:
    """`_put_location` of fields outside their widths: the reference's arithmetic on Python
    integers (as snapshot_records), in decimal."""
    location = ((<object>ledger << 64) | entry) << 21 | (<object>index + 1)
    cdef bytes text = str((location << 45) | ms).encode("ascii")
    if PyBytes_GET_SIZE(text) > _MAX_VALUE_TEXT:  # cannot be: every field has 64 bits at most
        raise ValueError(f"packed location {text!r} too long")
    memcpy(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))
    return out + PyBytes_GET_SIZE(text)


# The fields' widths in a packed location, as C constants (Cython makes a Python int of a
# literal above a C int, and a comparison with it needs the GIL).
cdef extern from *:
    """
    #define MAGNETAR_INDEX_LIMIT ((int32_t)((1 << 21) - 1))
    #define MAGNETAR_MS_LIMIT ((int64_t)1 << 45)
    """
    const int32_t _INDEX_LIMIT "MAGNETAR_INDEX_LIMIT"
    const int64_t _MS_LIMIT "MAGNETAR_MS_LIMIT"


cdef class KeySnapshot:
    """broker.publish.idempotency_table.PyKeySnapshot, compiled: the durable slots of a table,
    oldest first, in columns of its own (PyMem: tracemalloc counts them)."""

    cdef uint8_t *_digests
    cdef double *_stamps
    cdef int64_t *_ledgers
    cdef int64_t *_entries
    cdef int32_t *_batch
    cdef Py_ssize_t _count

    def __dealloc__(self):
        PyMem_Free(self._digests)
        PyMem_Free(self._stamps)
        PyMem_Free(self._ledgers)
        PyMem_Free(self._entries)
        PyMem_Free(self._batch)

    def __len__(self):
        return self._count

    cdef int _allocate(self, Py_ssize_t count) except -1:
        count = max(count, 1)
        self._digests = <uint8_t *>PyMem_Malloc(count * _DIGEST)
        self._stamps = <double *>PyMem_Malloc(count * sizeof(double))
        self._ledgers = <int64_t *>PyMem_Malloc(count * sizeof(int64_t))
        self._entries = <int64_t *>PyMem_Malloc(count * sizeof(int64_t))
        self._batch = <int32_t *>PyMem_Malloc(count * sizeof(int32_t))
        if (not self._digests or not self._stamps or not self._ledgers or not self._entries
                or not self._batch):
            raise MemoryError()  # __dealloc__ frees what was allocated
        return 0

    def json(self, str prefix not None):
        """PyKeySnapshot.json: ``{prefix + digest.hex(): packed location}`` as the JSON text
        json.dumps writes between its braces, in one bytes object. Runs without the GIL but for
        a location outside the fields' widths (the reference's arithmetic, in Python)."""
        cdef bytes head = _json_name_prefix(prefix)
        cdef Py_ssize_t per_key = 1 + PyBytes_GET_SIZE(head) + 2 * _DIGEST + 2 + _MAX_VALUE_TEXT
        cdef PyObject *raw = magnetar_bytes_new(NULL, max(1, self._count * per_key))
        cdef char *start = PyBytes_AS_STRING(<object>raw)
        cdef char *out = start
        cdef const char *name = PyBytes_AS_STRING(head)
        cdef Py_ssize_t name_size = PyBytes_GET_SIZE(head), i = 0
        cdef int64_t ms = 0
        cdef double last_stamp = -1.0
        try:
            while i < self._count:
                with nogil:
                    i = self._render(start, &out, i, name, name_size, &last_stamp, &ms)
                if i < self._count:  # the slot at i is outside the widths
                    out = _put_reference_location(
                        out, self._ledgers[i], self._entries[i], self._batch[i], ms)
                    i += 1
        except BaseException:
            Py_XDECREF(raw)
            raise
        return magnetar_bytes_cut(raw, out - start)

    cdef Py_ssize_t _render(self, const char *start, char **end, Py_ssize_t i,
                            const char *name, Py_ssize_t name_size, double *last_stamp,
                            int64_t *ms) noexcept nogil:
        """Render slots from ``i`` on at ``*end``, up to the last or to one whose location is
        outside the fields' widths (its name and colon written, its index returned)."""
        cdef char *out = end[0]
        cdef const uint8_t *digest
        cdef int64_t entry
        cdef int32_t index
        cdef int k
        while i < self._count:
            if self._stamps[i] != last_stamp[0]:  # keys of one entry share the stamp
                last_stamp[0] = self._stamps[i]
                ms[0] = _stamp_ms(self._stamps[i])
            if out != start:
                out[0] = b","
                out += 1
            out[0] = b'"'
            memcpy(out + 1, name, name_size)
            out += 1 + name_size
            digest = self._digests + i * _DIGEST
            for k in range(_DIGEST):
                out[2 * k] = _HEX[digest[k] >> 4]
                out[2 * k + 1] = _HEX[digest[k] & 15]
            out[2 * _DIGEST] = b'"'
            out[2 * _DIGEST + 1] = b":"
            out += 2 * _DIGEST + 2
            entry = self._entries[i]
            index = self._batch[i]
            if entry < 0 or not (-1 <= index < _INDEX_LIMIT) or not (0 <= ms[0] < _MS_LIMIT):
                break
            out = _put_location(out, self._ledgers[i], entry, index, ms[0])
            i += 1
        end[0] = out
        return i
