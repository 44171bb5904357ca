# Batch records from columns: pack_records of protocol/batch_builder.py (included in
# _speedups.pyx). Same arguments, results and errors as the reference, py_pack_records, which
# the property tests (tests/protocol/test_batch_builder.py) hold it to. The records are written
# into one growing C buffer: no Python object per row (ids after the first are counted in C).

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from collections.abc import Mapping as _Mapping

cdef object _PACK_U64_LIMIT = 1 << 64


cdef struct _PackBuffer:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int _pack_reserve(_PackBuffer *out, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = out.size + extra
    cdef Py_ssize_t capacity
    cdef char *grown
    if need <= out.capacity:
        return 0
    capacity = max(need, 2 * out.capacity, 4096)
    grown = <char *>PyMem_Realloc(out.data, capacity)
    if grown == NULL:
        raise MemoryError()
    out.data = grown
    out.capacity = capacity
    return 0


cdef inline Py_ssize_t _pack_varint_size(uint64_t value) noexcept nogil:
    cdef Py_ssize_t size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size


cdef inline void _pack_varint(_PackBuffer *out, uint64_t value) noexcept nogil:
    """Append a varint; room for 10 bytes was reserved."""
    cdef char *p = out.data + out.size
    while value > 0x7F:
        p[0] = <char>((value & 0x7F) | 0x80)
        p += 1
        value >>= 7
    p[0] = <char>value
    out.size = p + 1 - out.data


cdef int _pack_bytes(_PackBuffer *out, const char *data, Py_ssize_t size) except -1:
    """Append a length prefix and ``size`` bytes."""
    _pack_reserve(out, 10 + size)
    _pack_varint(out, <uint64_t>size)
    memcpy(out.data + out.size, data, size)
    out.size += size
    return 0


cdef uint64_t _pack_u64(object value, str what) except? 0:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value < _PACK_U64_LIMIT:
        raise ValueError(f"{what} {value} is outside 0 .. 2**64-1")
    return PyLong_AsUnsignedLongLong(value)


cdef const char *_pack_text(object value, str what, Py_ssize_t *size) except NULL:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return PyUnicode_AsUTF8AndSize(value, size)


cdef int _pack_properties(_PackBuffer *out, object properties) except -1:
    cdef const char *k
    cdef const char *v
    cdef Py_ssize_t k_size, v_size, pair
    if not isinstance(properties, _Mapping):
        raise TypeError(f"properties must be a mapping, not {type(properties).__name__}")
    for key, value in properties.items():
        k = _pack_text(key, "a property key", &k_size)
        v = _pack_text(value, "a property value", &v_size)
        pair = 2 + _pack_varint_size(k_size) + k_size + _pack_varint_size(v_size) + v_size
        _pack_reserve(out, 11)
        out.data[out.size] = 0x0A
        out.size += 1
        _pack_varint(out, <uint64_t>pair)
        _pack_reserve(out, 1)
        out.data[out.size] = 0x0A
        out.size += 1
        _pack_bytes(out, k, k_size)
        _pack_reserve(out, 1)
        out.data[out.size] = 0x12
        out.size += 1
        _pack_bytes(out, v, v_size)
    return 0


def pack_records(payloads, first_sequence_id, Py_ssize_t start, Py_ssize_t max_messages,
                 Py_ssize_t max_bytes, keys=None, properties=None, event_times=None,
                 sequence_ids=None):
    """The compiled ``protocol.batch_builder.py_pack_records``."""
    cdef Py_ssize_t count = len(payloads)
    cdef Py_ssize_t row, record_start, header_start, header_size, payload_size, record
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t key_size
    cdef const char *key_data
    cdef uint64_t sequence_id, event_time
    cdef uint64_t previous = 0
    cdef uint64_t base = 0  # the start row's sequence id, when they count up
    cdef bint have_previous = False
    cdef uint32_t be
    cdef _PackBuffer out
    if not 0 <= start < count:
        raise ValueError(f"start {start} is not a row of {count}")
    if max_messages < 1 or max_bytes < 1:
        raise ValueError("max_messages and max_bytes must be at least 1")
    for column in (keys, properties, event_times, sequence_ids):
        if column is not None and len(column) < count:
            raise ValueError("every column must have a value for each payload")
    out.data = NULL
    out.size = 0
    out.capacity = 0
    try:
        row = start
        while row < count and row - start < max_messages:
            payload = payloads[row]
            if payload is not None and not isinstance(payload, bytes):
                raise TypeError(
                    f"a payload must be bytes or None, not {type(payload).__name__}"
                )
            if sequence_ids is None:
                # The first row's id is checked as the reference does; the next ones count
                # up from it in C (an id past 2**64-1 goes back to the check, for its error).
                if row > start and base + <uint64_t>(row - start) > base:
                    sequence_id = base + <uint64_t>(row - start)
                else:
                    sequence_id = _pack_u64(first_sequence_id + row, "a sequence id")
                    base = sequence_id
            else:
                sequence_id = _pack_u64(sequence_ids[row], "a sequence id")
            if have_previous and sequence_id <= previous:
                raise ValueError(f"sequence id {sequence_id} does not follow {previous}")
            record_start = out.size
            _pack_reserve(&out, 4)
            out.size += 4
            header_start = out.size
            if properties is not None:
                props = properties[row]
                if props:
                    _pack_properties(&out, props)
            if keys is not None:
                key = keys[row]
                if key is not None:
                    key_data = _pack_text(key, "a key", &key_size)
                    _pack_reserve(&out, 1)
                    out.data[out.size] = 0x12
                    out.size += 1
                    _pack_bytes(&out, key_data, key_size)
            payload_size = 0 if payload is None else PyBytes_GET_SIZE(payload)
            _pack_reserve(&out, 11)
            out.data[out.size] = 0x18
            out.size += 1
            _pack_varint(&out, <uint64_t>payload_size)
            if event_times is not None:
                event = event_times[row]
                if event:
                    event_time = _pack_u64(event, "an event time")
                    _pack_reserve(&out, 11)
                    out.data[out.size] = 0x28
                    out.size += 1
                    _pack_varint(&out, event_time)
            _pack_reserve(&out, 13)
            out.data[out.size] = 0x40
            out.size += 1
            _pack_varint(&out, sequence_id)
            if payload is None:
                out.data[out.size] = 0x48
                out.data[out.size + 1] = 0x01
                out.size += 2
            header_size = out.size - header_start
            record = 4 + header_size + payload_size
            if row > start and total + record > max_bytes:
                out.size = record_start
                break
            be = <uint32_t>header_size
            out.data[record_start] = <char>(be >> 24)
            out.data[record_start + 1] = <char>(be >> 16)
            out.data[record_start + 2] = <char>(be >> 8)
            out.data[record_start + 3] = <char>be
            if payload_size:
                _pack_reserve(&out, payload_size)
                memcpy(out.data + out.size, PyBytes_AS_STRING(payload), payload_size)
                out.size += payload_size
            total += record
            previous = sequence_id
            have_previous = True
            row += 1
        return PyBytes_FromStringAndSize(out.data, out.size), row
    finally:
        PyMem_Free(out.data)
