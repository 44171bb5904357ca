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


cdef inline uint64_t _rh_hash(const uint8_t *p, Py_ssize_t size, bint little) noexcept nogil:
    cdef uint64_t h = _RH_P5 + <uint64_t>size
    cdef uint64_t word, k
    cdef Py_ssize_t at = 0
    while at < size:
        if little and size - at >= 8:
            memcpy(&word, p + at, 8)  # one unaligned load
        else:
            word = _rh_word(p + at, size - at if size - at < 8 else 8)
        k = _rh_rotl(word * _RH_P2, 31) * _RH_P1
        h = _rh_rotl(h ^ k, 27) * _RH_P1 + _RH_P4
        at += 8
    h ^= h >> 33
    h *= _RH_P2
    h ^= h >> 29
    h *= _RH_P3
    return h ^ (h >> 32)


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
                    h = _rh_hash(base + start, stop - start, little)
                    memcpy(out + (i - first - 1) * 8, &h, 8)
                start = stop
        finally:
            PyBuffer_Release(&data_view)
    finally:
        PyBuffer_Release(&bounds_view)
    return result



def hash_order(hashes, Py_ssize_t first, Py_ssize_t count):
    """See protocol.row_hash.py_hash_order (same arguments, same result): a stable LSD radix
    sort, eight passes of one byte each, over (hash, row) pairs."""
    cdef Py_buffer view
    cdef Py_ssize_t size = count if count > 0 else 1
    cdef uint64_t *key_block = NULL
    cdef int64_t *row_block = NULL
    cdef uint64_t *keys
    cdef uint64_t *keys_to
    cdef int64_t *rows
    cdef int64_t *rows_to
    cdef Py_ssize_t counts[256]
    cdef Py_ssize_t i, total, slot
    cdef int shift, digit
    cdef bint ties = False
    if first < 0 or count < 0:
        raise ValueError("first and count must be >= 0")
    result = PyBytes_FromStringAndSize(NULL, count * 8)
    PyObject_GetBuffer(hashes, &view, PyBUF_SIMPLE)
    try:
        if (first + count) * 8 > view.len:
            raise ValueError("the hashes buffer is too short")
        key_block = <uint64_t *>malloc(size * 16)
        row_block = <int64_t *>malloc(size * 8)
        if key_block == NULL or row_block == NULL:
            raise MemoryError()
        keys, keys_to = key_block, key_block + size
        rows, rows_to = <int64_t *>PyBytes_AS_STRING(result), row_block
        memcpy(keys, (<const uint8_t *>view.buf) + first * 8, count * 8)
        with nogil:
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
            # After eight passes (even) the rows are back in the result's buffer.
            for i in range(1, count):
                if keys[i] == keys[i - 1]:
                    ties = True
                    break
    finally:
        PyBuffer_Release(&view)
        free(key_block)
        free(row_block)
    return result, ties
