# encode_record_parts: the storage records of a flush as parts to hand to pwritev (included in
# _speedups.pyx; the reference is broker.storage.recovery.py_encode_record_parts).
#
# Why parts and not one joined buffer: a group commit of batched entries is megabytes, and a
# fresh buffer of that size is a fresh mmap, so joining cost a page fault per 4 KiB plus the
# copy, and the kernel's copy into the page cache then ran at a third of its speed (P1 of issue
# #26: 77 % of the broker's CPU was system time). An entry of OWN_BUFFER_BYTES or more is written
# from its own bytes; the headers and the small entries between two such are copied into one run
# (a part costs pwritev about as much as copying a kilobyte, and a group of small unbatched
# entries is small). Both CRCs of a record (the header's, over length + entry, and the segment's
# running one, over every record byte) are taken here, the GIL released once when the group is
# large. An entry whose CRC-32C is already known (the SEND's verified checksum, ``Frame.entry_crc``)
# and that is large gets both without a pass over its bytes: each is the CRC of the bytes before
# the entry shifted over the entry's length, XOR the entry's CRC (CRC-32C combination). On P1's
# batched ingest the two passes were 9-11 % of the broker's CPU.

from cpython.bytes cimport PyBytes_Check
from libc.stdlib cimport free, malloc

cdef enum:
    # Below this many entry bytes the CRC loop is shorter than a GIL hand-over.
    _RELEASE_GIL_BYTES = 65536
    # Entries from this size on are a part of their own (``RECORD_OWN_BUFFER_BYTES``).
    _OWN_BUFFER_BYTES = 4096
    # From this size on a known entry CRC is combined rather than the entry read: a combination
    # costs a few hundred cycles (one multiplication per set bit of the length), a pass over
    # 4 KiB about as much.
    _COMBINE_FROM_BYTES = 4096

RECORD_OWN_BUFFER_BYTES = _OWN_BUFFER_BYTES


cdef inline void _store_le32(uint8_t *p, uint32_t value) noexcept nogil:
    p[0] = value & 0xFF
    p[1] = (value >> 8) & 0xFF
    p[2] = (value >> 16) & 0xFF
    p[3] = (value >> 24) & 0xFF


cdef void _record_crcs(const uint8_t **data, Py_ssize_t *sizes, const int64_t *known,
                       Py_ssize_t count, uint8_t *headers, uint32_t *running) noexcept nogil:
    """Fill ``headers`` (8 bytes per entry) and carry the running CRC over header + entry;
    ``known[i]`` is entry i's CRC-32C, or -1."""
    cdef Py_ssize_t i
    cdef uint32_t crc, power
    cdef uint8_t *header
    for i in range(count):
        header = headers + 8 * i
        _store_le32(header, <uint32_t>sizes[i])
        if known[i] >= 0 and sizes[i] >= _COMBINE_FROM_BYTES:
            power = magnetar_crc32c_x8n(<uint64_t>sizes[i])
            crc = magnetar_crc32c_combine_with(
                power, magnetar_crc32c(0, header, 4), <uint32_t>known[i]
            )
            _store_le32(header + 4, crc)
            running[0] = magnetar_crc32c_combine_with(
                power, magnetar_crc32c(running[0], header, 8), <uint32_t>known[i]
            )
        else:
            crc = magnetar_crc32c(magnetar_crc32c(0, header, 4), data[i], sizes[i])
            _store_le32(header + 4, crc)
            running[0] = magnetar_crc32c(magnetar_crc32c(running[0], header, 8), data[i], sizes[i])


cdef bytes _run(const uint8_t **data, Py_ssize_t *sizes, const uint8_t *headers,
                Py_ssize_t first, Py_ssize_t stop, bint with_next_header):
    """Records ``first``..``stop - 1`` copied into one bytes, then the header of ``stop``."""
    cdef Py_ssize_t i, size = 8 if with_next_header else 0
    cdef char *out
    for i in range(first, stop):
        size += 8 + sizes[i]
    run = PyBytes_FromStringAndSize(NULL, size)
    out = PyBytes_AS_STRING(run)
    for i in range(first, stop):
        memcpy(out, headers + 8 * i, 8)
        memcpy(out + 8, data[i], sizes[i])
        out += 8 + sizes[i]
    if with_next_header:
        memcpy(out, headers + 8 * stop, 8)
    return run


def encode_record_parts(list entries, uint32_t running_crc, list entry_crcs=None):
    """``(parts, offsets, size, crc)``: the records of ``entries`` (bytes) as parts to write
    back to back, each record's offset from the first, their total size and ``running_crc``
    carried over them all. ``entry_crcs``: each entry's CRC-32C where the caller knows it (a
    verified checksum), -1 where not; a wrong one makes a record that fails its check on read.
    Anything but bytes goes to the reference (it takes any buffer)."""
    cdef Py_ssize_t count = len(entries), i, first = 0, total = 0, size = 0
    cdef const uint8_t **data
    cdef Py_ssize_t *sizes
    cdef int64_t *known
    cdef uint8_t *headers
    cdef uint32_t running = running_crc
    cdef list parts = [], offsets
    for i in range(count):
        if not PyBytes_Check(entries[i]) or PyBytes_GET_SIZE(entries[i]) > UINT32_MAX:
            return _reference_encode_record_parts(entries, running_crc, entry_crcs)
    if entry_crcs is not None and len(entry_crcs) != count:
        raise ValueError(f"{len(entry_crcs)} entry CRCs for {count} entries")
    data = <const uint8_t **>malloc(count * sizeof(uint8_t *) + 1)
    sizes = <Py_ssize_t *>malloc(count * sizeof(Py_ssize_t) + 1)
    known = <int64_t *>malloc(count * sizeof(int64_t) + 1)
    headers = <uint8_t *>malloc(count * 8 + 1)
    if data == NULL or sizes == NULL or known == NULL or headers == NULL:
        free(data)
        free(sizes)
        free(known)
        free(headers)
        raise MemoryError()
    try:
        for i in range(count):
            data[i] = <const uint8_t *>PyBytes_AS_STRING(entries[i])
            sizes[i] = PyBytes_GET_SIZE(entries[i])
            known[i] = -1 if entry_crcs is None else _known_crc(entry_crcs[i])
            total += sizes[i]
        # ``entries`` holds every bytes object alive while the GIL is away.
        if total >= _RELEASE_GIL_BYTES:
            with nogil:
                _record_crcs(data, sizes, known, count, headers, &running)
        else:
            _record_crcs(data, sizes, known, count, headers, &running)
        offsets = [None] * count
        for i in range(count):
            offsets[i] = size
            size += 8 + sizes[i]
            if sizes[i] >= _OWN_BUFFER_BYTES:
                parts.append(_run(data, sizes, headers, first, i, True))
                parts.append(entries[i])
                first = i + 1
        if first < count:
            parts.append(_run(data, sizes, headers, first, count, False))
        return parts, offsets, size, running
    finally:
        free(data)
        free(sizes)
        free(known)
        free(headers)


cdef inline int64_t _known_crc(object value) except -2:
    """A CRC-32C from the caller, or -1 (unknown) for -1 and anything out of range."""
    cdef long long crc = value
    return crc if 0 <= crc <= UINT32_MAX else -1


def crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b):
    """The CRC-32C of A then B from ``crc(A)``, ``crc(B)`` and ``len(B)`` (tests check the
    combination the flush relies on against the package's CRC)."""
    return magnetar_crc32c_combine_with(magnetar_crc32c_x8n(size_b), crc_a, crc_b)


cdef object _reference_encode_record_parts = None


def bind_record_parts(reference):
    """Install the reference ``encode_record_parts`` for inputs the compiled one leaves to it."""
    global _reference_encode_record_parts
    _reference_encode_record_parts = reference
