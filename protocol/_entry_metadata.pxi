# parse_entry_metadata: the facts of a stored entry's MessageMetadata, as the dispatcher reads
# them once per entry it hands out (included in _speedups.pyx after _message.pxi, whose
# _key_value_complete it reuses).

from libc.stdint cimport int64_t


cdef struct _EntryFacts:
    const uint8_t *name
    Py_ssize_t name_size
    const uint8_t *key
    Py_ssize_t key_size
    const uint8_t *ordering_key
    Py_ssize_t ordering_key_size
    uint64_t sequence_id
    uint64_t publish_time
    uint64_t event_time
    uint64_t highest_sequence_id
    int64_t deliver_at_time
    int32_t in_batch
    int32_t compression
    int32_t num_chunks
    int32_t chunk_id
    uint32_t present  # bit n: field number n was on the wire


# CompressionType values upb knows; another value would read back as NONE there (proto2 closed
# enum: the field goes to the unknown set), so the walk leaves such an entry to the reference.
cdef enum:
    _MAX_COMPRESSION = 4


cdef bint _walk_entry_metadata(const uint8_t *p, const uint8_t *end,
                               _EntryFacts *facts) noexcept nogil:
    """Collect the values of the facts; False when anything is not the common layout."""
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef Py_ssize_t size
    cdef int expected
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        expected = _METADATA_WIRE[field] if field <= 30 else 9
        if expected == 9:
            p = _skip(p, end, wire)
            if p == NULL:
                return False
            continue
        if <int>wire != expected:
            return False  # -1 (encryption keys) or a wire type upb would keep as unknown
        if wire == 2:
            p = _length(p, end, &size)
            if p == NULL:
                return False
            if field == 1:
                facts.name = p
                facts.name_size = size
            elif field == 6:
                facts.key = p
                facts.key_size = size
            elif field == 18:
                facts.ordering_key = p
                facts.ordering_key_size = size
            elif field == 4 and not _key_value_complete(p, p + size):
                return False  # properties: a KeyValue lacking key or value fails IsInitialized
            p += size
            continue
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        if field < 32:
            facts.present |= <uint32_t>1 << field
        if field == 2:
            facts.sequence_id = value
        elif field == 3:
            facts.publish_time = value
        elif field == 8:
            if value > _MAX_COMPRESSION:
                return False
            facts.compression = <int32_t>value
        elif field == 11:
            facts.in_batch = <int32_t><uint32_t>value
        elif field == 12:
            facts.event_time = value
        elif field == 19:
            facts.deliver_at_time = <int64_t>value
        elif field == 24:
            facts.highest_sequence_id = value
        elif field == 27:
            facts.num_chunks = <int32_t><uint32_t>value
        elif field == 29:
            facts.chunk_id = <int32_t><uint32_t>value
    return True


cdef object _EntryMetadata = None
cdef object _reference_parse_entry_metadata = None


cdef object _entry_metadata(object entry):
    """The body of ``parse_entry_metadata``; None: the reference decides."""
    cdef _EntryFacts facts
    cdef Py_ssize_t size
    cdef uint32_t metadata_size
    cdef const uint8_t *base
    if type(entry) is not bytes:
        return None
    size = PyBytes_GET_SIZE(entry)
    base = <const uint8_t *>PyBytes_AS_STRING(entry)
    if size < 4:
        return None
    metadata_size = _be32(base)
    if metadata_size > <uint64_t>(size - 4):
        return None
    facts.name = facts.key = facts.ordering_key = NULL
    facts.name_size = facts.key_size = facts.ordering_key_size = 0
    facts.sequence_id = facts.publish_time = facts.event_time = facts.highest_sequence_id = 0
    facts.deliver_at_time = 0
    facts.in_batch = 1  # the proto defaults
    facts.compression = facts.num_chunks = facts.chunk_id = 0
    facts.present = 0
    if (
        not _walk_entry_metadata(base + 4, base + 4 + metadata_size, &facts)
        or facts.name == NULL
        or not (facts.present & (1 << 2))
        or not (facts.present & (1 << 3))
        or not _utf8(facts.name, facts.name_size)
        or (facts.key != NULL and not _utf8(facts.key, facts.key_size))
    ):
        return None
    is_batch = (facts.present & (1 << 11)) != 0
    return _EntryMetadata(
        PyUnicode_DecodeUTF8(<const char *>facts.name, facts.name_size, NULL),
        facts.sequence_id,
        facts.highest_sequence_id if facts.present & (1 << 24) else None,
        facts.in_batch if is_batch else 1,
        is_batch,
        facts.publish_time,
        PyUnicode_DecodeUTF8(<const char *>facts.key, facts.key_size, NULL)
        if facts.key != NULL else None,
        PyBytes_FromStringAndSize(<const char *>facts.ordering_key, facts.ordering_key_size)
        if facts.ordering_key != NULL else None,
        facts.deliver_at_time if facts.present & (1 << 19) else None,
        facts.event_time if facts.event_time else None,
        facts.compression,
        4 + metadata_size,
        facts.chunk_id if facts.num_chunks else -1,
        facts.num_chunks,
    )


def parse_entry_metadata(entry):
    """``protocol.metadata.parse_entry_metadata``: the same facts and errors, without a protobuf
    parse: a varint walk of the metadata reads the values; anything it does not accept (bytes
    other than ``bytes``, encryption keys, unknown enum values, odd wire types, missing required
    fields, names that are not UTF-8) goes to the reference on the same bytes."""
    parsed = _entry_metadata(entry)
    return _reference_parse_entry_metadata(entry) if parsed is None else parsed


def bind_parse_entry_metadata(reference, entry_metadata_class):
    global _reference_parse_entry_metadata, _EntryMetadata
    _reference_parse_entry_metadata = reference
    _EntryMetadata = entry_metadata_class
    return parse_entry_metadata
