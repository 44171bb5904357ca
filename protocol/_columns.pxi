# Batch payloads split into columns in C (included by _speedups.pyx): protocol.batch_columns's
# compiled walk. One pass over the records reads each SingleMessageMetadata by a varint walk and
# fills fixed-width buffers; a second copies the payloads into one data buffer. Same rule as the
# other fast paths: only the layout clients write (known fields of their wire types, UTF-8
# strings, KeyValues with both fields) is taken here; anything else, valid or not, goes to the
# reference on the same bytes, so every error and every odd case is the reference's.

from libc.stdlib cimport free, malloc
from libc.stdint cimport INT32_MAX

cdef object _BatchColumns = None
cdef object _reference_columns = None

# The smallest record: a 4-byte header size and a header of one payload_size field (2 bytes).
cdef enum:
    MIN_RECORD = 6


cdef struct _Record:
    Py_ssize_t header        # the header's first byte
    Py_ssize_t header_end
    Py_ssize_t key           # the partition key's first byte (when key_size > 0)
    Py_ssize_t key_size
    uint64_t sequence_id
    uint64_t event_time
    bint has_sequence_id
    bint null_value
    bint has_properties


def bind_columns(columns_class, reference):
    """The compiled ``batch_columns``, with the result class and the reference it defers to."""
    global _BatchColumns, _reference_columns
    _BatchColumns = columns_class
    _reference_columns = reference
    return batch_columns


cdef bint _key_value_ok(const uint8_t *p, const uint8_t *end) noexcept:
    """A KeyValue of exactly a UTF-8 key and a UTF-8 value (each once)."""
    cdef uint32_t field, wire
    cdef Py_ssize_t size
    cdef int seen = 0
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL or wire != 2 or field > 2 or seen & (1 << field):
            return False
        seen |= 1 << field
        p = _length(p, end, &size)
        if p == NULL or not _utf8(p, size):
            return False
        p += size
    return seen == 6


cdef bint _walk_header(const uint8_t *p, const uint8_t *end, _Record *record,
                       Py_ssize_t *payload_size, const uint8_t *base) noexcept:
    """Read one SingleMessageMetadata into ``record``; False: leave it to the reference."""
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef Py_ssize_t size
    cdef bint sized = False
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if field == 1 or field == 2 or field == 7:
            if wire != 2:
                return False
            p = _length(p, end, &size)
            if p == NULL:
                return False
            if field == 1:
                if not _key_value_ok(p, p + size):
                    return False
                record.has_properties = True
            elif field == 2:
                if not _utf8(p, size):
                    return False
                record.key, record.key_size = p - base, size  # the last one wins, as in upb
            p += size
            continue
        if field > 10:
            p = _skip(p, end, wire)  # unknown: kept aside by upb, nothing to read
            if p == NULL:
                return False
            continue
        if wire != 0:
            return False
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        if field == 3:
            if value > INT32_MAX:
                return False  # a negative size: the reference's error
            payload_size[0] = <Py_ssize_t>value
            sized = True
        elif field == 5:
            record.event_time = value
        elif field == 8:
            record.sequence_id, record.has_sequence_id = value, True
        elif field == 9:
            record.null_value = value != 0
    return sized


cdef list _properties_of(const uint8_t *p, const uint8_t *end):
    """The (key, value) pairs of a header ``_walk_header`` accepted."""
    cdef list pairs = []
    cdef uint32_t field = 0, wire = 0
    cdef Py_ssize_t size = 0, inner = 0
    cdef const uint8_t *q
    cdef const uint8_t *stop
    cdef object key = None, value = None, text = None
    while p < end:
        p = _tag(p, end, &field, &wire)
        if wire != 2:
            p = _skip(p, end, wire)
            continue
        p = _length(p, end, &size)
        if field == 1:
            q, stop = p, p + size
            while q < stop:
                q = _tag(q, stop, &field, &wire)
                q = _length(q, stop, &inner)
                text = PyUnicode_DecodeUTF8(<const char *>q, inner, NULL)
                if field == 1:
                    key = text
                else:
                    value = text
                q += inner
            pairs.append((key, value))
        p += size
    return pairs


def batch_columns(payload, Py_ssize_t count, first_sequence_id):
    """Compiled ``protocol.batch_columns.py_batch_columns`` (same arguments, same result)."""
    if (type(payload) is not bytes or type(first_sequence_id) is not int or count <= 0
            or count > PyBytes_GET_SIZE(payload) // MIN_RECORD
            or PyBytes_GET_SIZE(payload) > INT32_MAX):
        return _reference_columns(payload, count, first_sequence_id)
    cdef _Record *records = <_Record *>malloc(count * sizeof(_Record))
    if records == NULL:
        raise MemoryError()
    try:
        result = _columns(payload, count, first_sequence_id & _U64_MASK, records)
    finally:
        free(records)
    if result is None:
        return _reference_columns(payload, count, first_sequence_id)
    return result


cdef object _columns(bytes payload, Py_ssize_t count, uint64_t first, _Record *records):
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(payload)
    cdef Py_ssize_t position = 0, header_end, size = 0, total = 0, i
    cdef _Record *record
    cdef bint any_key = False, any_event = False, any_null = False, any_properties = False
    for i in range(count):
        if end - position < 4:
            return None
        header_end = position + 4 + <Py_ssize_t>_be32(base + position)
        if header_end > end:
            return None
        record = &records[i]
        record.header, record.header_end = position + 4, header_end
        record.key_size = 0
        record.event_time = 0
        record.has_sequence_id = record.null_value = record.has_properties = False
        if not _walk_header(base + position + 4, base + header_end, record, &size, base):
            return None
        if size > end - header_end:
            return None
        any_key |= record.key_size > 0
        any_event |= record.event_time != 0
        any_null |= record.null_value
        any_properties |= record.has_properties
        total += size
        position = header_end + size
    if position != end:
        return None
    values = PyBytes_FromStringAndSize(NULL, total)
    offsets = PyBytes_FromStringAndSize(NULL, (count + 1) * 4)
    sequences = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef char *out = PyBytes_AS_STRING(values)
    cdef int32_t *offset = <int32_t *>PyBytes_AS_STRING(offsets)
    cdef uint64_t *sequence = <uint64_t *>PyBytes_AS_STRING(sequences)
    cdef Py_ssize_t at = 0, start
    offset[0] = 0
    for i in range(count):
        record = &records[i]
        start = records[i].header_end
        size = (records[i + 1].header - 4 if i + 1 < count else end) - start
        memcpy(out + at, base + start, size)
        at += size
        offset[i + 1] = <int32_t>at
        sequence[i] = record.sequence_id if record.has_sequence_id else first + <uint64_t>i
    return _BatchColumns(
        count,
        offsets,
        values,
        sequences,
        _events(records, count) if any_event else None,
        _keys(base, records, count) if any_key else None,
        _all_properties(base, records, count) if any_properties else None,
        _nulls(records, count) if any_null else None,
    )


cdef bytes _events(_Record *records, Py_ssize_t count):
    cdef bytes events = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef uint64_t *event = <uint64_t *>PyBytes_AS_STRING(events)
    cdef Py_ssize_t i
    for i in range(count):
        event[i] = records[i].event_time
    return events


cdef bytes _nulls(_Record *records, Py_ssize_t count):
    cdef bytes nulls = PyBytes_FromStringAndSize(NULL, count)
    cdef char *flag = PyBytes_AS_STRING(nulls)
    cdef Py_ssize_t i
    for i in range(count):
        flag[i] = 1 if records[i].null_value else 0
    return nulls


cdef list _keys(const uint8_t *base, _Record *records, Py_ssize_t count):
    cdef list keys = []
    cdef Py_ssize_t i
    for i in range(count):
        if records[i].key_size > 0:
            keys.append(PyBytes_FromStringAndSize(
                <const char *>base + records[i].key, records[i].key_size))
        else:
            keys.append(None)
    return keys


cdef list _all_properties(const uint8_t *base, _Record *records, Py_ssize_t count):
    cdef list properties = []
    cdef Py_ssize_t i
    for i in range(count):
        if records[i].has_properties:
            properties.append(
                _properties_of(base + records[i].header, base + records[i].header_end))
        else:
            properties.append(None)
    return properties
