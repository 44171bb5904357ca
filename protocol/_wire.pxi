# The protobuf wire format, as far as the fast paths of _speedups.pyx need it (included there).
# Every reader returns NULL for what it does not take: the caller then leaves the bytes to the
# reference, which decides (and words the error).

cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline const uint8_t *_varint(const uint8_t *p, const uint8_t *end,
                                   uint64_t *out) noexcept nogil:
    """Read a varint of at most 64 bits; NULL when truncated or longer (the reference decides)."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t byte
    while p < end:
        byte = p[0]
        p += 1
        if shift == 63:
            if byte > 1:
                return NULL
            out[0] = value | (<uint64_t>byte << 63)
            return p
        value |= <uint64_t>(byte & 0x7F) << shift
        if byte < 0x80:
            out[0] = value
            return p
        shift += 7
    return NULL


cdef inline const uint8_t *_tag(const uint8_t *p, const uint8_t *end, uint32_t *field,
                                uint32_t *wire) noexcept nogil:
    """A field tag of at most 5 bytes naming a field >= 1; NULL otherwise."""
    cdef uint64_t value
    cdef const uint8_t *after = _varint(p, end, &value)
    if after == NULL or after - p > 5 or value > UINT32_MAX or value < 8:
        return NULL
    field[0] = <uint32_t>(value >> 3)
    wire[0] = <uint32_t>(value & 7)
    return after


cdef inline const uint8_t *_length(const uint8_t *p, const uint8_t *end,
                                   Py_ssize_t *size) noexcept nogil:
    """The length prefix of a LEN field that fits before ``end``; NULL otherwise."""
    cdef uint64_t value
    p = _varint(p, end, &value)
    if p == NULL or value > <uint64_t>(end - p):
        return NULL
    size[0] = <Py_ssize_t>value
    return p


cdef const uint8_t *_skip(const uint8_t *p, const uint8_t *end, uint32_t wire) noexcept nogil:
    """Skip the value of an unknown field (as upb keeps it); groups and bad wire types: NULL."""
    cdef uint64_t ignored
    cdef Py_ssize_t size
    if wire == 0:
        return _varint(p, end, &ignored)
    if wire == 1:
        return p + 8 if end - p >= 8 else NULL
    if wire == 2:
        p = _length(p, end, &size)
        return p + size if p != NULL else NULL
    if wire == 5:
        return p + 4 if end - p >= 4 else NULL
    return NULL


cdef bint _well_formed(const uint8_t *p, const uint8_t *end) noexcept nogil:
    """A message of length-delimited strings and scalars (KeyValue): any such bytes parse."""
    cdef uint32_t field, wire
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        p = _skip(p, end, wire)
        if p == NULL:
            return False
    return True


cdef bint _utf8(const uint8_t *p, Py_ssize_t size):
    """The reference (upb) gives a str field back as bytes when it is not strict UTF-8."""
    cdef Py_ssize_t i
    for i in range(size):
        if p[i] >= 0x80:
            break
    else:
        return True
    try:
        PyUnicode_DecodeUTF8(<const char *>p, size, NULL)
    except UnicodeDecodeError:
        return False
    return True
