# The idempotency-key check of the SEND path, compiled (issue #26; included by _speedups.pyx).
#
# * key_digest: BLAKE2b-128 (RFC 7693) in C, the same bytes as hashlib.blake2b(digest_size=16);
# * scan_key_metadata / scan_key_batch: the key digests of an entry, by a walk over the wire
#   bytes (protocol/idempotency_scan.py is the reference; anything the walk does not fully
#   understand is handed to the reference on the same bytes, so verdicts cannot differ);
# (KeyTable, the window's digest store, is in _key_table.pxi.)

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t
from libc.math cimport floor
from libc.string cimport memchr, memcmp, memset

cdef object _KeyScanBudget = None
cdef object _py_scan_metadata = None


cdef int _bind_reference() except -1:
    """The reference's exception and metadata scan, imported on first use: the reference
    module imports this extension (through protocol._accel), so not at module init."""
    global _KeyScanBudget, _py_scan_metadata
    if _py_scan_metadata is None:
        from protocol import idempotency_scan
        _KeyScanBudget = idempotency_scan.KeyScanBudget
        _py_scan_metadata = idempotency_scan.py_scan_metadata
    return 0


# ------------------------------------------------------------------ BLAKE2b-128

DEF _DIGEST = 16


cdef inline uint64_t _le64(const uint8_t *p) noexcept nogil:
    return ((<uint64_t>p[0]) | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16)
            | (<uint64_t>p[3] << 24) | (<uint64_t>p[4] << 32) | (<uint64_t>p[5] << 40)
            | (<uint64_t>p[6] << 48) | (<uint64_t>p[7] << 56))


# The compression function in C with every round written out: the message schedule's
# indexes are constants, so the working vector stays in registers. The loop over the sigma
# table this replaces cost ~260 ns a key on the SEND path (issue #26, item 6); this is ~2x
# faster. BLAKE2b as RFC 7693 specifies it (tests compare with hashlib).
cdef extern from *:
    """
    #define MAGNETAR_ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
    #define MAGNETAR_B2_G(a, b, c, d, x, y) do { \
        a = a + b + (x); d = MAGNETAR_ROTR64(d ^ a, 32); \
        c = c + d; b = MAGNETAR_ROTR64(b ^ c, 24); \
        a = a + b + (y); d = MAGNETAR_ROTR64(d ^ a, 16); \
        c = c + d; b = MAGNETAR_ROTR64(b ^ c, 63); \
    } while (0)
    #define MAGNETAR_B2_ROUND(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, \
                              s14, s15) do { \
        MAGNETAR_B2_G(v0, v4, v8, v12, m[s0], m[s1]); \
        MAGNETAR_B2_G(v1, v5, v9, v13, m[s2], m[s3]); \
        MAGNETAR_B2_G(v2, v6, v10, v14, m[s4], m[s5]); \
        MAGNETAR_B2_G(v3, v7, v11, v15, m[s6], m[s7]); \
        MAGNETAR_B2_G(v0, v5, v10, v15, m[s8], m[s9]); \
        MAGNETAR_B2_G(v1, v6, v11, v12, m[s10], m[s11]); \
        MAGNETAR_B2_G(v2, v7, v8, v13, m[s12], m[s13]); \
        MAGNETAR_B2_G(v3, v4, v9, v14, m[s14], m[s15]); \
    } while (0)

    static const uint64_t magnetar_b2_iv[8] = {
        0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
        0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
        0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL,
    };

    static inline uint64_t magnetar_b2_le64(const uint8_t *p) {
        return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16)
            | ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40)
            | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
    }

    static void magnetar_b2_compress(uint64_t *h, const uint64_t *m, uint64_t t, int last) {
        uint64_t v0 = h[0], v1 = h[1], v2 = h[2], v3 = h[3];
        uint64_t v4 = h[4], v5 = h[5], v6 = h[6], v7 = h[7];
        uint64_t v8 = magnetar_b2_iv[0], v9 = magnetar_b2_iv[1];
        uint64_t v10 = magnetar_b2_iv[2], v11 = magnetar_b2_iv[3];
        uint64_t v12 = magnetar_b2_iv[4] ^ t, v13 = magnetar_b2_iv[5];
        uint64_t v14 = last ? ~magnetar_b2_iv[6] : magnetar_b2_iv[6];
        uint64_t v15 = magnetar_b2_iv[7];
        MAGNETAR_B2_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        MAGNETAR_B2_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
        MAGNETAR_B2_ROUND(11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4);
        MAGNETAR_B2_ROUND(7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8);
        MAGNETAR_B2_ROUND(9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13);
        MAGNETAR_B2_ROUND(2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9);
        MAGNETAR_B2_ROUND(12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11);
        MAGNETAR_B2_ROUND(13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10);
        MAGNETAR_B2_ROUND(6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5);
        MAGNETAR_B2_ROUND(10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0);
        MAGNETAR_B2_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        MAGNETAR_B2_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
        h[0] ^= v0 ^ v8; h[1] ^= v1 ^ v9; h[2] ^= v2 ^ v10; h[3] ^= v3 ^ v11;
        h[4] ^= v4 ^ v12; h[5] ^= v5 ^ v13; h[6] ^= v6 ^ v14; h[7] ^= v7 ^ v15;
    }

    /* BLAKE2b-128 of data[0:size], unkeyed. The state starts from the constants and the last
       block's words are read from the input with the zero padding made in registers: the
       copy of the IV and the memcpy + memset of a padded block this replaces compiled to
       `rep movs` (slow to start) and a memset call, ~8 ns of a ~150 ns key (issue #26 item 6). */
    static void magnetar_blake2b_128(const uint8_t *data, size_t size, uint8_t *out) {
        uint64_t h[8], m[16], word;
        uint64_t t = 0;
        size_t i, rest;
        for (i = 0; i < 8; i++) h[i] = magnetar_b2_iv[i];
        h[0] ^= 0x01010000ULL ^ 16;  /* no key, a 16-byte digest */
        while (size > 128) {
            for (i = 0; i < 16; i++) m[i] = magnetar_b2_le64(data + 8 * i);
            t += 128;
            magnetar_b2_compress(h, m, t, 0);
            data += 128;
            size -= 128;
        }
        /* One test per word (a fixed count, unrolled): written as a copy and a fill, the
           compiler makes them a `rep movs` and a memset call again. */
        for (i = 0; i < 16; i++) {
            if (8 * i + 8 <= size) {
                m[i] = magnetar_b2_le64(data + 8 * i);
            } else if (8 * i < size) {  /* the partial word, little-endian, zero above */
                word = 0;
                for (rest = size - 8 * i; rest > 0; rest--) {
                    word = (word << 8) | data[8 * i + rest - 1];
                }
                m[i] = word;
            } else {
                m[i] = 0;
            }
        }
        magnetar_b2_compress(h, m, t + size, 1);
        for (i = 0; i < 16; i++) out[i] = (uint8_t)(h[i >> 3] >> (8 * (i & 7)));
    }
    """
    # The byte counter's high word stays 0: inputs are far below 2**64 bytes.
    void _blake2b_128_c "magnetar_blake2b_128" (const uint8_t *data, size_t size,
                                                uint8_t *out) noexcept nogil


cdef inline void _blake2b_128(const uint8_t *data, Py_ssize_t size, uint8_t *out) noexcept nogil:
    _blake2b_128_c(data, <size_t>size, out)


cdef inline bytes _digest_of(const uint8_t *data, Py_ssize_t size):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, _DIGEST)
    _blake2b_128(data, size, <uint8_t *>PyBytes_AS_STRING(out))
    return out


def key_digest(key):
    """BLAKE2b-128 of ``key`` (bytes, or any contiguous buffer)."""
    cdef Py_buffer view
    if type(key) is bytes:
        return _digest_of(<const uint8_t *>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        return _digest_of(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------ the key scan

cdef bytes _KEY_NAME = b"magnetar.idempotency-key"

# What a header's properties say about the key (the reference's _Properties).
cdef struct _KeyProps:
    Py_ssize_t count
    bint found
    const uint8_t *value
    Py_ssize_t value_size


cdef bint _key_value(const uint8_t *p, const uint8_t *end, _KeyProps *props) noexcept nogil:
    """Add one KeyValue to ``props``; False when it is malformed."""
    cdef const uint8_t *key = NULL
    cdef const uint8_t *value = NULL
    cdef Py_ssize_t key_size = 0, value_size = 0, size
    cdef uint32_t field, wire
    props.count += 1
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if wire == 2 and (field == 1 or field == 2):
            p = _length(p, end, &size)
            if p == NULL:
                return False
            if field == 1:
                key, key_size = p, size
            else:
                value, value_size = p, size
            p += size
        else:
            p = _skip(p, end, wire)
            if p == NULL:
                return False
    if not props.found and key_size == 24 and memcmp(key, "magnetar.idempotency-key", 24) == 0:
        props.found = True
        props.value = value
        props.value_size = value_size
    return True


cdef inline object _props_digest(_KeyProps *props):
    if props.value_size == 0:
        return None
    return _digest_of(props.value, props.value_size)


cdef inline int32_t _as_int32(uint64_t value) noexcept nogil:
    return <int32_t><uint32_t>(value & 0xFFFFFFFFULL)


def scan_key_metadata(bytes entry not None, Py_ssize_t max_properties):
    """protocol.idempotency_scan.scan_metadata, compiled (for bytes: what the SEND path has)."""
    cdef Py_ssize_t length = PyBytes_GET_SIZE(entry), size, field_size
    cdef const uint8_t *start
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef int64_t num_messages = -1, compression = 0, uncompressed = 0, chunks = 0
    cdef bint encrypted = False
    cdef _KeyProps props
    _bind_reference()
    if length < 4:
        return None
    start = <const uint8_t *>PyBytes_AS_STRING(entry)
    size = <Py_ssize_t>_be32(start)
    if size > length - 4:
        return None
    props.count = 0
    props.found = False
    props.value = NULL
    props.value_size = 0
    p = start + 4
    end = p + size
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return _py_scan_metadata(entry, max_properties)
        if wire == 2 and (field == 4 or field == 13):
            p = _length(p, end, &field_size)
            if p == NULL:
                return _py_scan_metadata(entry, max_properties)
            if field == 4:
                if not _key_value(p, p + field_size, &props):
                    return _py_scan_metadata(entry, max_properties)
            else:
                encrypted = True
            p += field_size
        elif wire == 0 and (field == 8 or field == 9 or field == 11 or field == 27):
            p = _varint(p, end, &value)
            if p == NULL:
                return _py_scan_metadata(entry, max_properties)
            if field == 8:
                if value < 5:
                    compression = <int64_t>value
            elif field == 9:
                uncompressed = <int64_t>(value & 0xFFFFFFFFULL)
            elif field == 11:
                num_messages = _as_int32(value)
            else:
                chunks = _as_int32(value)
        else:
            p = _skip(p, end, wire)
            if p == NULL:
                return _py_scan_metadata(entry, max_properties)
    if chunks > 1 or encrypted:
        return None
    if props.found and props.count > max_properties:
        raise _KeyScanBudget(f"more than {max_properties} properties to look through for keys")
    return (size, num_messages, compression, uncompressed, _props_digest(&props))


def scan_key_batch(bytes payload not None, Py_ssize_t count, Py_ssize_t header_budget,
                   Py_ssize_t max_properties):
    """protocol.idempotency_scan.scan_batch, compiled (for bytes)."""
    cdef Py_ssize_t length = PyBytes_GET_SIZE(payload), header_size, walked = 0, field_size, records = 0
    cdef int64_t payload_size
    cdef const uint8_t *base
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef const uint8_t *header_end
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef _KeyProps props
    cdef list keys = []
    _bind_reference()
    if length == 0:
        return keys if count == 0 else None
    base = <const uint8_t *>PyBytes_AS_STRING(payload)
    p = base
    end = base + length
    while p < end:
        if end - p < 4 or records == count:
            return None
        header_size = <Py_ssize_t>_be32(p)
        header_budget -= header_size
        if header_budget < 0:
            raise _KeyScanBudget(
                "batch record headers above the metadata bytes the key check reads"
            )
        if header_size > end - p - 4:
            return None
        p += 4
        header_end = p + header_size
        payload_size = -1
        props.count = 0
        props.found = False
        props.value = NULL
        props.value_size = 0
        while p < header_end:
            p = _tag(p, header_end, &field, &wire)
            if p == NULL:
                return None
            if wire == 2 and field == 1:
                p = _length(p, header_end, &field_size)
                if p == NULL or not _key_value(p, p + field_size, &props):
                    return None
                p += field_size
            elif wire == 0 and field == 3:
                p = _varint(p, header_end, &value)
                if p == NULL:
                    return None
                payload_size = _as_int32(value)
            else:
                p = _skip(p, header_end, wire)
                if p == NULL:
                    return None
        if payload_size < 0:
            return None
        if props.found:
            walked += props.count
            if walked > max_properties:
                raise _KeyScanBudget(
                    f"more than {max_properties} properties to look through for keys"
                )
        keys.append(_props_digest(&props))
        records += 1
        if payload_size > end - p:
            return None
        p += payload_size
    return keys if records == count else None


cdef extern from "string.h":
    void *memmem(const void *haystack, size_t haystacklen, const void *needle,
                 size_t needlelen) nogil


def quick_key(bytes entry not None, Py_ssize_t max_header_bytes, Py_ssize_t max_properties):
    """protocol.idempotency_scan.quick_key, compiled."""
    cdef Py_ssize_t length = PyBytes_GET_SIZE(entry), size
    cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(entry)
    _bind_reference()
    if length < 4:
        return False
    size = <Py_ssize_t>_be32(start)
    if memmem(start, length, "magnetar.idempotency-key", 24) == NULL:
        if size > length - 4:
            size = length - 4
        return False if memchr(start + 4, 0x40, size) == NULL else None
    if size > max_header_bytes:
        return None
    try:
        scanned = scan_key_metadata(entry, max_properties)
    except _KeyScanBudget:
        return None
    if scanned is None or scanned[1] >= 0 or scanned[4] is None:
        return None
    return scanned[4]
