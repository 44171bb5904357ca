# MessageMetadata: the SendEntryChecker of _speedups.pyx (included there).

cdef struct _Facts:
    const uint8_t *name
    Py_ssize_t name_size
    const uint8_t *key
    Py_ssize_t key_size
    const uint8_t *uuid
    Py_ssize_t uuid_size
    bint has_sequence
    bint has_publish_time
    int32_t in_batch
    bint has_in_batch  # for decode_entry_plain (_message.pxi)
    bint has_compression
    int32_t num_chunks
    int32_t chunk_id


# MessageMetadata field number -> its wire type (0 varint, 2 length-delimited); -1: the
# reference decides (encryption_keys: nested messages with nested messages); fields past the
# table or marked 9 are unknown to the schema and skipped as upb does.
cdef int _METADATA_WIRE[31]
_METADATA_WIRE[:] = [
    9, 2, 0, 0, 2, 2, 2, 2, 0, 0,  # 0-9: -, producer_name, sequence_id, publish_time, ...
    9, 0, 0, -1, 2, 2, 2, 0, 2, 0,  # 10-19: -, num_messages_in_batch, event_time, enc. keys, ...
    0, 9, 0, 0, 0, 0, 2, 0, 0, 0,  # 20-29: marker_type, -, txnid x2, highest, null, uuid, ...
    0,  # 30: null_partition_key
]


cdef bint _walk_metadata(const uint8_t *p, const uint8_t *end, _Facts *facts) noexcept nogil:
    """Collect the checker's facts; False when anything is not the common layout."""
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
            elif field == 26:
                facts.uuid = p
                facts.uuid_size = size
            elif field == 4 and not _well_formed(p, p + size):  # properties: KeyValue
                return False
            p += size
            continue
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        if field == 2:
            facts.has_sequence = True
        elif field == 3:
            facts.has_publish_time = True
        elif field == 11:
            facts.in_batch = <int32_t><uint32_t>value
            facts.has_in_batch = True
        elif field == 8:
            facts.has_compression = True
        elif field == 27:
            facts.num_chunks = <int32_t><uint32_t>value
        elif field == 29:
            facts.chunk_id = <int32_t><uint32_t>value
    return True


cdef class SendEntryChecker:
    """``protocol.metadata.SendEntryChecker``: same ``check``, same results and errors (the
    reference, on the same bytes, decides everything this walk does not accept)."""

    cdef object _reference

    def __init__(self):
        self._reference = None

    def check(self, entry, num_messages):
        cdef _Facts facts
        cdef Py_ssize_t size
        cdef uint32_t metadata_size
        cdef const uint8_t *base
        cdef long long wanted
        cdef int overflow = 0
        if type(entry) is not bytes or type(num_messages) is not int:
            return self._slow(entry, num_messages)
        size = PyBytes_GET_SIZE(entry)
        base = <const uint8_t *>PyBytes_AS_STRING(entry)
        if size < 4:
            return self._slow(entry, num_messages)
        metadata_size = _be32(base)
        if metadata_size > <uint64_t>(size - 4):
            return self._slow(entry, num_messages)
        facts.name = NULL
        facts.key = NULL
        facts.uuid = NULL
        facts.name_size = facts.key_size = facts.uuid_size = 0
        facts.has_sequence = facts.has_publish_time = False
        facts.in_batch = 1  # the proto default: right for an entry that is not a batch
        facts.has_in_batch = facts.has_compression = False
        facts.num_chunks = 0
        facts.chunk_id = 0
        if not _walk_metadata(base + 4, base + 4 + metadata_size, &facts):
            return self._slow(entry, num_messages)
        if (
            facts.name_size == 0
            or not facts.has_sequence
            or not facts.has_publish_time
            or not _utf8(facts.name, facts.name_size)
            or (facts.key != NULL and not _utf8(facts.key, facts.key_size))
        ):
            return self._slow(entry, num_messages)
        wanted = PyLong_AsLongLongAndOverflow(num_messages, &overflow)
        if overflow or facts.in_batch != wanted or facts.in_batch < 1:
            return self._slow(entry, num_messages)
        if facts.num_chunks == 0:
            return None
        if not (
            0 <= facts.chunk_id < facts.num_chunks <= MAX_CHUNKS
            and facts.in_batch == 1
            and facts.uuid_size > 0
            and _utf8(facts.uuid, facts.uuid_size)
        ):
            return self._slow(entry, num_messages)
        uuid = PyUnicode_DecodeUTF8(<const char *>facts.uuid, facts.uuid_size, NULL)
        return _ChunkInfo(uuid, facts.chunk_id, facts.num_chunks)

    cdef _slow(self, entry, num_messages):
        if self._reference is None:
            self._reference = _ReferenceChecker()
        return self._reference.check(entry, num_messages)


def bind_metadata(reference_checker, chunk_info):
    global _ReferenceChecker, _ChunkInfo
    _ReferenceChecker = reference_checker
    _ChunkInfo = chunk_info
    return SendEntryChecker
