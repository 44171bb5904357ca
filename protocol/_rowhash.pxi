# rowhash64 v1 over the values of a binary column (included by _speedups.pyx): the compiled
# protocol.row_hash.row_hashes; the output is an Arrow uint64 buffer (native byte order). The function is part of the Spark sink's exactly-once identity
# (rows are numbered in hash order): it must give exactly the reference's values, on every
# build and every CPU, forever (tests/protocol/test_row_hash.py pins fixed values).

from libc.stdint cimport int64_t, uint16_t
from libc.stdlib cimport free, malloc

# The reference's P1..P5 (xxHash64's primes), as C literals.
cdef extern from *:
    """
    #define MAGNETAR_RH_P1 0x9E3779B185EBCA87ULL
    #define MAGNETAR_RH_P2 0xC2B2AE3D27D4EB4FULL
    #define MAGNETAR_RH_P3 0x165667B19E3779F9ULL
    #define MAGNETAR_RH_P4 0x85EBCA77C2B2AE63ULL
    #define MAGNETAR_RH_P5 0x27D4EB2F165667C5ULL
    """
    const uint64_t _RH_P1 "MAGNETAR_RH_P1"
    const uint64_t _RH_P2 "MAGNETAR_RH_P2"
    const uint64_t _RH_P3 "MAGNETAR_RH_P3"
    const uint64_t _RH_P4 "MAGNETAR_RH_P4"
    const uint64_t _RH_P5 "MAGNETAR_RH_P5"


cdef inline uint64_t _rh_rotl(uint64_t value, int bits) noexcept nogil:
    return (value << bits) | (value >> (64 - bits))


cdef inline uint64_t _rh_word(const uint8_t *p, Py_ssize_t size) noexcept nogil:
    """``size`` (1..8) bytes as a little-endian word, on any CPU (zero-padded)."""
    cdef uint64_t word = 0
    cdef Py_ssize_t i
    for i in range(size - 1, -1, -1):
        word = (word << 8) | p[i]
    return word


cdef inline uint64_t _rh_step(uint64_t h, uint64_t word) noexcept nogil:
    """One 8-byte word into the state."""
    return _rh_rotl(h ^ (_rh_rotl(word * _RH_P2, 31) * _RH_P1), 27) * _RH_P1 + _RH_P4


cdef inline uint64_t _rh_finish(
    uint64_t h, const uint8_t *p, Py_ssize_t at, Py_ssize_t size, bint little
) noexcept nogil:
    """The words of ``p`` from byte ``at`` on, then the avalanche."""
    cdef uint64_t word
    while at < size:
        if little and size - at >= 8:
            memcpy(&word, p + at, 8)  # one unaligned load
        else:
            word = _rh_word(p + at, size - at if size - at < 8 else 8)
        h = _rh_step(h, word)
        at += 8
    h ^= h >> 33
    h *= _RH_P2
    h ^= h >> 29
    h *= _RH_P3
    return h ^ (h >> 32)


cdef inline uint64_t _rh_hash(const uint8_t *p, Py_ssize_t size, bint little) noexcept nogil:
    return _rh_finish(_RH_P5 + <uint64_t>size, p, 0, size, little)


cdef void _rh_hash4(
    const uint8_t **p, const Py_ssize_t *size, uint64_t *out, bint little
) noexcept nogil:
    """Four values at once: each value's words form one serial chain of multiplies, so the
    words all four have are stepped in lockstep (four independent chains keep the multiplier
    busy), then each value finishes alone. The same function as ``_rh_hash``, value by value."""
    cdef uint64_t h0 = _RH_P5 + <uint64_t>size[0], h1 = _RH_P5 + <uint64_t>size[1]
    cdef uint64_t h2 = _RH_P5 + <uint64_t>size[2], h3 = _RH_P5 + <uint64_t>size[3]
    cdef uint64_t w0, w1, w2, w3
    cdef Py_ssize_t at = 0, common = size[0]
    cdef int lane
    for lane in range(1, 4):
        if size[lane] < common:
            common = size[lane]
    common = (common // 8) * 8 if little else 0  # whole words every value has
    while at < common:
        memcpy(&w0, p[0] + at, 8)
        memcpy(&w1, p[1] + at, 8)
        memcpy(&w2, p[2] + at, 8)
        memcpy(&w3, p[3] + at, 8)
        h0 = _rh_step(h0, w0)
        h1 = _rh_step(h1, w1)
        h2 = _rh_step(h2, w2)
        h3 = _rh_step(h3, w3)
        at += 8
    out[0] = _rh_finish(h0, p[0], at, size[0], little)
    out[1] = _rh_finish(h1, p[1], at, size[1], little)
    out[2] = _rh_finish(h2, p[2], at, size[2], little)
    out[3] = _rh_finish(h3, p[3], at, size[3], little)


def row_hashes(offsets, data, Py_ssize_t first, Py_ssize_t count, bint wide):
    """See protocol.row_hash.py_row_hashes (same arguments, same bytes)."""
    cdef Py_buffer bounds_view
    cdef Py_buffer data_view
    cdef uint16_t probe = 1
    cdef bint little = (<uint8_t *>&probe)[0] == 1
    cdef Py_ssize_t i, start = 0, stop, width = 8 if wide else 4
    cdef const uint8_t *base
    cdef const uint8_t *bounds
    cdef int64_t bound64
    cdef int32_t bound32
    cdef uint64_t h
    cdef uint8_t *out
    cdef const uint8_t *lanes[4]
    cdef Py_ssize_t sizes[4]
    cdef uint64_t hashed[4]
    cdef int lane, pending = 0
    if first < 0 or count < 0:
        raise ValueError("first and count must be >= 0")
    result = PyBytes_FromStringAndSize(NULL, count * 8)
    out = <uint8_t *>PyBytes_AS_STRING(result)
    PyObject_GetBuffer(offsets, &bounds_view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(data, &data_view, PyBUF_SIMPLE)
        try:
            if (first + count + 1) * width > bounds_view.len:
                raise ValueError("the offsets buffer is too short")
            bounds = <const uint8_t *>bounds_view.buf
            base = <const uint8_t *>data_view.buf
            for i in range(first, first + count + 1):
                if wide:
                    memcpy(&bound64, bounds + i * 8, 8)
                    stop = <Py_ssize_t>bound64
                else:
                    memcpy(&bound32, bounds + i * 4, 4)
                    stop = <Py_ssize_t>bound32
                if i > first:
                    if stop < start or start < 0 or stop > data_view.len:
                        raise ValueError("an offset outside the data buffer")
                    # Values wait in fours (``_rh_hash4``); the rest are hashed one by one.
                    lanes[pending] = base + start
                    sizes[pending] = stop - start
                    pending += 1
                    if pending == 4:
                        _rh_hash4(lanes, sizes, hashed, little)
                        memcpy(out + (i - first - 4) * 8, hashed, 32)
                        pending = 0
                start = stop
            for lane in range(pending):  # the last values, fewer than four
                h = _rh_hash(lanes[lane], sizes[lane], little)
                memcpy(out + (count - pending + lane) * 8, &h, 8)
        finally:
            PyBuffer_Release(&data_view)
    finally:
        PyBuffer_Release(&bounds_view)
    return result



# ``hash_order`` buckets rows by the top bits of their hash, then sorts each bucket by
# insertion: hashes are uniform, so a bucket holds one or two rows and the whole sort is a few
# passes, where eight byte-wide LSD passes cost several times more. The bucketing takes two
# levels (an MSD radix step of at most _RH_TOP_BITS bits, then one inside each top bucket):
# scattering straight into ~count buckets writes each row to a cold cache line (an 8 MB
# spread for 500k rows), while each level here writes to a few hundred sequential streams,
# and a top bucket (a few thousand rows) stays in cache for the second level. A bucket larger
# than _RH_BUCKET_MAX (hashes that are not uniform: many equal ones, or an adversarial set)
# would make insertion quadratic: then the LSD sort runs.
cdef enum:
    _RH_BUCKET_BITS_MAX = 24
    _RH_TOP_BITS = 8
    _RH_SUB_BITS_MAX = 12
    _RH_BUCKET_MAX = 64
    _RH_KEPT_PAIRS_MAX = 1 << 21  # the scratch kept between calls: 32 MB (1M rows), at most


cdef struct _RhPair:
    uint64_t key
    int64_t row


# hash_order's scratch (two pairs a row) is kept from one call to the next: freed, its pages
# went back to the system and the next call (the next Spark task) faulted every one in again,
# which cost as much as the sort. Taken and given back with the GIL held; a call that finds it
# taken (another thread's sort, which runs without the GIL) allocates its own.
cdef _RhPair *_rh_kept = NULL
cdef Py_ssize_t _rh_kept_pairs = 0


cdef _RhPair *_rh_take_pairs(Py_ssize_t pairs, Py_ssize_t *capacity):
    """A block of at least ``pairs`` pairs (the kept one when large enough), its size in
    ``capacity``; NULL when out of memory."""
    global _rh_kept, _rh_kept_pairs
    cdef _RhPair *block
    if _rh_kept != NULL and _rh_kept_pairs >= pairs:
        block = _rh_kept
        capacity[0] = _rh_kept_pairs
        _rh_kept = NULL
        _rh_kept_pairs = 0
        return block
    capacity[0] = pairs
    return <_RhPair *>malloc(pairs * sizeof(_RhPair))


cdef void _rh_give_pairs(_RhPair *block, Py_ssize_t capacity):
    """Keep ``block`` for the next call (the larger of it and the one kept), or free it."""
    global _rh_kept, _rh_kept_pairs
    if block == NULL:
        return
    if capacity <= _RH_KEPT_PAIRS_MAX and capacity > _rh_kept_pairs:
        free(_rh_kept)
        _rh_kept = block
        _rh_kept_pairs = capacity
    else:
        free(block)


cdef void _rh_scatter(
    const _RhPair *source, _RhPair *to, Py_ssize_t count, Py_ssize_t *ends, int shift,
    int bits,
) noexcept nogil:
    """Stable counting scatter of ``source`` into ``to`` by the ``bits`` bits of each key from
    bit ``shift`` up; leaves in ``ends[b]`` the end of bucket ``b``."""
    cdef Py_ssize_t i, b, total, slot, buckets = (<Py_ssize_t>1) << bits
    cdef uint64_t mask = ((<uint64_t>1) << bits) - 1
    for b in range(buckets):
        ends[b] = 0
    for i in range(count):
        ends[(source[i].key >> shift) & mask] += 1
    total = 0
    for b in range(buckets):
        slot = ends[b]
        ends[b] = total  # the bucket's next free slot (its start, for now)
        total += slot
    for i in range(count):  # rows of one bucket keep their order
        b = (source[i].key >> shift) & mask
        to[ends[b]] = source[i]
        ends[b] += 1


cdef bint _rh_insertion(_RhPair *pairs, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """Stable insertion sort of ``pairs[start:end]`` by key; False (nothing sorted) when the
    bucket is larger than _RH_BUCKET_MAX."""
    cdef Py_ssize_t i, j
    cdef _RhPair pair
    if end - start > _RH_BUCKET_MAX:
        return False
    for i in range(start + 1, end):
        pair = pairs[i]
        j = i
        while j > start and pairs[j - 1].key > pair.key:  # strictly greater: stable
            pairs[j] = pairs[j - 1]
            j -= 1
        pairs[j] = pair
    return True


cdef int _rh_top_bits(int bits) noexcept nogil:
    """The first level's share of ``bits``: at most _RH_TOP_BITS, unless the second level
    would need more than _RH_SUB_BITS_MAX."""
    if bits - _RH_TOP_BITS > _RH_SUB_BITS_MAX:
        return bits - _RH_SUB_BITS_MAX
    return bits if bits < _RH_TOP_BITS else _RH_TOP_BITS


cdef int _rh_bucket_sort(
    const uint8_t *keys, int64_t *rows_to, Py_ssize_t count, _RhPair *pairs, _RhPair *spare,
    Py_ssize_t *ends, Py_ssize_t *sub_ends, int bits,
) noexcept nogil:
    """Stable order of ``keys`` (``count`` native words, any alignment) into ``rows_to``:
    ``bits`` bits of buckets in two levels (``_rh_top_bits``), each bucket insertion-sorted. Returns 1 when two keys are equal, 0
    when none are, -1 (nothing usable written) when a bucket is larger than _RH_BUCKET_MAX.
    ``pairs`` and ``spare`` hold ``count`` pairs each, ``ends`` 2^top and ``sub_ends``
    2^(bits - top) counters."""
    cdef int top = _rh_top_bits(bits)
    cdef int sub = bits - top
    cdef Py_ssize_t i, b, c, start, end, sub_start
    cdef _RhPair *done
    cdef int ties = 0
    for i in range(count):
        memcpy(&spare[i].key, keys + i * 8, 8)
        spare[i].row = i
    _rh_scatter(spare, pairs, count, ends, 64 - top, top)
    start = 0
    for b in range((<Py_ssize_t>1) << top):
        end = ends[b]
        done = pairs
        if sub == 0:
            if not _rh_insertion(pairs, start, end):
                return -1
        elif end > start:
            done = spare
            _rh_scatter(pairs + start, spare + start, end - start, sub_ends, 64 - bits, sub)
            sub_start = start
            for c in range((<Py_ssize_t>1) << sub):
                if not _rh_insertion(spare, sub_start, start + sub_ends[c]):
                    return -1
                sub_start = start + sub_ends[c]
        for i in range(start + 1, end):  # equal keys share a bucket: they end side by side
            if done[i].key == done[i - 1].key:
                ties = 1
        for i in range(start, end):
            rows_to[i] = done[i].row
        start = end
    return ties


cdef void _rh_lsd_sort(
    uint64_t *keys, uint64_t *keys_to, int64_t *rows, int64_t *rows_to, Py_ssize_t count,
) noexcept nogil:
    """Stable LSD radix sort, eight passes of one byte; the sorted rows end in ``rows`` and
    the keys in ``keys`` (an even number of swaps)."""
    cdef Py_ssize_t counts[256]
    cdef Py_ssize_t i, total, slot
    cdef int shift, digit
    for i in range(count):
        rows[i] = i
    for shift in range(0, 64, 8):
        for digit in range(256):
            counts[digit] = 0
        for i in range(count):
            counts[(keys[i] >> shift) & 0xFF] += 1
        total = 0
        for digit in range(256):
            slot = counts[digit]
            counts[digit] = total
            total += slot
        for i in range(count):
            digit = (keys[i] >> shift) & 0xFF
            slot = counts[digit]
            counts[digit] = slot + 1
            keys_to[slot] = keys[i]
            rows_to[slot] = rows[i]
        keys, keys_to = keys_to, keys
        rows, rows_to = rows_to, rows


def hash_order(hashes, Py_ssize_t first, Py_ssize_t count):
    """See protocol.row_hash.py_hash_order (same arguments, same result): two levels of
    buckets by the top bits then insertion (``_rh_bucket_sort``), or the LSD radix sort when a
    bucket is large; both stable, so both give the reference's order."""
    cdef Py_buffer view
    cdef Py_ssize_t size = count if count > 0 else 1
    cdef uint64_t *key_block = NULL
    cdef int64_t *row_block = NULL
    cdef _RhPair *pair_block = NULL
    cdef Py_ssize_t pair_capacity = 0
    cdef Py_ssize_t *ends = NULL
    cdef const uint8_t *keys
    cdef int64_t *rows
    cdef Py_ssize_t i, top_buckets
    cdef int bits = 1, verdict
    cdef bint ties = False
    if first < 0 or count < 0:
        raise ValueError("first and count must be >= 0")
    while bits < _RH_BUCKET_BITS_MAX and ((<Py_ssize_t>1) << bits) < count:
        bits += 1  # about one bucket per row, at most 2^24 buckets
    top_buckets = (<Py_ssize_t>1) << _rh_top_bits(bits)
    result = PyBytes_FromStringAndSize(NULL, count * 8)
    PyObject_GetBuffer(hashes, &view, PyBUF_SIMPLE)
    try:
        if (first + count) * 8 > view.len:
            raise ValueError("the hashes buffer is too short")
        pair_block = _rh_take_pairs(size * 2, &pair_capacity)
        ends = <Py_ssize_t *>malloc(
            (top_buckets + ((<Py_ssize_t>1) << _RH_SUB_BITS_MAX)) * sizeof(Py_ssize_t)
        )
        if pair_block == NULL or ends == NULL:
            raise MemoryError()
        keys = (<const uint8_t *>view.buf) + first * 8
        rows = <int64_t *>PyBytes_AS_STRING(result)
        with nogil:
            verdict = _rh_bucket_sort(
                keys, rows, count, pair_block, pair_block + size, ends, ends + top_buckets, bits
            )
        if verdict < 0:  # crowded buckets: the LSD sort, on a copy of the keys
            _rh_give_pairs(pair_block, pair_capacity)
            pair_block = NULL
            key_block = <uint64_t *>malloc(size * 16)
            row_block = <int64_t *>malloc(size * 8)
            if key_block == NULL or row_block == NULL:
                raise MemoryError()
            memcpy(key_block, keys, count * 8)
            with nogil:
                _rh_lsd_sort(key_block, key_block + size, rows, row_block, count)
                for i in range(1, count):
                    if key_block[i] == key_block[i - 1]:
                        ties = True
                        break
        else:
            ties = verdict == 1
    finally:
        PyBuffer_Release(&view)
        free(key_block)
        free(row_block)
        _rh_give_pairs(pair_block, pair_capacity)
        free(ends)
    return result, ties
