# MESSAGE frames, decoded in C (included by _speedups.pyx). What a client receives most: the
# CommandMessage fields every consumer reads (consumer id, entry position, redelivery count,
# epoch) as plain attributes, the payload section and its CRC-32C, without a protobuf parse.
# Same rule as the SEND path: only the layout a broker writes is taken here (type then message,
# a MessageIdData of scalars, no ack_set); anything else goes to the reference on the same bytes.

cdef enum:
    MESSAGE_TYPE = 9


cdef dict _MESSAGE_FIELD_BITS = {
    "consumer_id": 1 << 1,
    "message_id": 1 << 2,
    "redelivery_count": 1 << 3,
    "consumer_epoch": 1 << 5,
}

cdef dict _MESSAGE_ID_FIELD_BITS = {
    "ledgerId": 1 << 1,
    "entryId": 1 << 2,
    "partition": 1 << 3,
    "batch_index": 1 << 4,
}

cdef tuple _NO_ACK_SET = ()
cdef object _new_object = object.__new__
cdef object _MESSAGE_TYPE_INT = MESSAGE_TYPE


# Each of the three objects of a decoded MESSAGE parses the command's bytes itself when asked
# for what it does not hold (``_parsed_command``), rather than pointing back at the command:
# that reference cycle made every frame garbage only the cyclic collector frees, and its
# collections (full ones included) cost a consumer ~0.5 us per message.
cdef object _parsed_command(bytes raw):
    return _pb.BaseCommand.FromString(raw)


cdef class MessageIdFields:
    """The ``MessageIdData`` of a MESSAGE decoded here: position fields as attributes."""

    cdef readonly uint64_t ledgerId
    cdef readonly uint64_t entryId
    cdef readonly int32_t partition
    cdef readonly int32_t batch_index
    cdef uint32_t _present
    cdef bytes _raw  # the whole command
    cdef object _parsed

    cdef object _full(self):
        if self._parsed is None:
            self._parsed = _parsed_command(self._raw).message.message_id
        return self._parsed

    def HasField(self, name):
        bit = _MESSAGE_ID_FIELD_BITS.get(name)
        if bit is None:
            return self._full().HasField(name)
        return (self._present & <uint32_t>bit) != 0

    def __getattr__(self, name):
        return getattr(self._full(), name)

    def __eq__(self, other):
        return self._full() == other

    def __repr__(self):
        return repr(self._full())


cdef class MessageFields:
    """The ``CommandMessage`` of a MESSAGE decoded here (``ack_set`` is always empty: a frame
    carrying one is left to the reference); other attributes from a protobuf parse on use."""

    cdef readonly uint64_t consumer_id
    cdef readonly MessageIdFields message_id
    cdef readonly uint32_t redelivery_count
    cdef readonly uint64_t consumer_epoch
    cdef uint32_t _present
    cdef bytes _raw  # the whole command
    cdef object _parsed

    cdef object _full(self):
        if self._parsed is None:
            self._parsed = _parsed_command(self._raw).message
        return self._parsed

    @property
    def ack_set(self):
        return _NO_ACK_SET

    def HasField(self, name):
        bit = _MESSAGE_FIELD_BITS.get(name)
        if bit is None:
            return self._full().HasField(name)
        return (self._present & <uint32_t>bit) != 0

    def __getattr__(self, name):
        return getattr(self._full(), name)

    def __eq__(self, other):
        return self._full() == other

    def __repr__(self):
        return repr(self._full())


cdef class MessageCommand:
    """A MESSAGE's ``BaseCommand`` as the compiled decoder gives it (see ``SendCommand``)."""

    cdef readonly MessageFields message
    cdef bytes _raw
    cdef object _parsed

    @property
    def type(self):
        return MESSAGE_TYPE

    def _full(self):
        if self._parsed is None:
            self._parsed = _parsed_command(self._raw)
        return self._parsed

    def HasField(self, name):
        if name == "type" or name == "message":
            return True
        return self._full().HasField(name)

    def __getattr__(self, name):
        return getattr(self._full(), name)

    def __eq__(self, other):
        if isinstance(other, MessageCommand):
            other = (<MessageCommand>other)._full()
        return self._full() == other

    def __repr__(self):
        return repr(self._full())


cdef bint _parse_message_id(const uint8_t *p, const uint8_t *end, MessageIdFields fields) noexcept:
    """Walk a MessageIdData of scalars; False for anything else (ack_set, chunk ids, ...)."""
    cdef uint32_t field, wire
    cdef uint64_t value
    fields.partition = -1  # the proto defaults
    fields.batch_index = -1
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if field > 7:
            p = _skip(p, end, wire)
            if p == NULL:
                return False
            continue
        if wire != 0 or field > 4:
            return False
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        fields._present |= <uint32_t>1 << field
        if field == 1:
            fields.ledgerId = value
        elif field == 2:
            fields.entryId = value
        elif field == 3:
            fields.partition = <int32_t><uint32_t>value
        else:
            fields.batch_index = <int32_t><uint32_t>value
    return (fields._present & 0b110) == 0b110


cdef bint _parse_message(const uint8_t *p, const uint8_t *end, MessageFields fields) noexcept:
    """Walk a CommandMessage; False when anything is not the common layout."""
    cdef uint32_t field, wire
    cdef uint64_t value
    cdef Py_ssize_t size
    cdef MessageIdFields message_id
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if field > 5:
            p = _skip(p, end, wire)
            if p == NULL:
                return False
            continue
        if field == 2:
            # Twice would merge the two in protobuf: the reference does that.
            if wire != 2 or fields._present & (1 << 2):
                return False
            p = _length(p, end, &size)
            if p == NULL:
                return False
            message_id = MessageIdFields.__new__(MessageIdFields)
            if not _parse_message_id(p, p + size, message_id):
                return False
            fields.message_id = message_id
            fields._present |= 1 << 2
            p += size
            continue
        if wire != 0 or field == 4:  # ack_set (PIP-54 partial batches): the reference
            return False
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        fields._present |= <uint32_t>1 << field
        if field == 1:
            fields.consumer_id = value
        elif field == 3:
            if value > UINT32_MAX:  # truncated by protobuf: not a layout any broker writes
                return False
            fields.redelivery_count = <uint32_t>value
        else:
            fields.consumer_epoch = value
    return (fields._present & 0b110) == 0b110


cdef object _message_frame(const uint8_t *start, const uint8_t *end):
    """The Frame of a MESSAGE in ``[start, end)`` (after totalSize), or None: not recognised."""
    cdef uint32_t command_size = _be32(start)
    cdef const uint8_t *command = start + 4
    cdef const uint8_t *command_end
    cdef const uint8_t *p
    cdef Py_ssize_t size
    cdef MessageFields fields
    cdef MessageCommand parsed
    cdef bint has_checksum = False
    cdef uint32_t expected = 0
    cdef uint32_t skipped
    if command_size > <uint64_t>(end - command) or command_size < 4:
        return None
    command_end = command + command_size
    if command[0] != 0x08 or command[1] != MESSAGE_TYPE or command[2] != 0x4A:
        return None
    p = _length(command + 3, command_end, &size)
    if p == NULL or p + size != command_end:
        return None
    fields = MessageFields.__new__(MessageFields)
    if not _parse_message(p, command_end, fields):
        return None
    p = command_end
    if end - p >= 6 and ((p[0] << 8) | p[1]) == MAGIC_BROKER_ENTRY_METADATA:
        skipped = _be32(p + 2)
        if skipped > <uint64_t>(end - p - 6):
            return None
        p += 6 + skipped
    if end - p >= 6 and ((p[0] << 8) | p[1]) == MAGIC_CRC32C:
        expected = _be32(p + 2)
        has_checksum = True
        p += 6
    if end - p < 4 or _be32(p) > <uint64_t>(end - p - 4):
        return None
    entry = PyBytes_FromStringAndSize(<const char *>p, end - p)
    checksum_valid = (not has_checksum) or magnetar_crc32c(0, p, end - p) == expected
    parsed = MessageCommand.__new__(MessageCommand)
    parsed._raw = PyBytes_FromStringAndSize(<const char *>command, command_size)
    parsed.message = fields
    fields._raw = parsed._raw
    fields.message_id._raw = parsed._raw
    # The reference's Frame, its six slots set here: cheaper than its Python ``__init__``,
    # which is a good part of a MESSAGE's decode.
    frame = _new_object(_Frame)
    frame.command = parsed
    frame.type = _MESSAGE_TYPE_INT
    frame.entry = entry
    frame.checksum_valid = checksum_valid
    frame.has_checksum = has_checksum
    frame.entry_crc = <int64_t>expected if has_checksum and checksum_valid else -1
    return frame


# --- decode_entry: an entry's MessageMetadata and payload (what a consumer does per entry) ------

cdef object _reference_decode_entry = None
cdef object _reference_decode_entry_plain = None
cdef object _MessageMetadata_FromString = _pb.MessageMetadata.FromString


cdef bint _key_value_complete(const uint8_t *p, const uint8_t *end) noexcept nogil:
    """A KeyValue with both required strings (else upb's IsInitialized says no)."""
    cdef uint32_t field, wire
    cdef Py_ssize_t size
    cdef uint32_t seen = 0
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if wire == 2 and (field == 1 or field == 2):
            seen |= field
        p = _skip(p, end, wire)
        if p == NULL:
            return False
    return seen == 3


cdef bint _complete_properties(const uint8_t *p, const uint8_t *end) noexcept nogil:
    """Every ``properties`` entry of a metadata the walk accepted is a complete KeyValue."""
    cdef uint32_t field, wire
    cdef Py_ssize_t size
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if field == 4 and wire == 2:
            p = _length(p, end, &size)
            if p == NULL or not _key_value_complete(p, p + size):
                return False
            p += size
            continue
        p = _skip(p, end, wire)
        if p == NULL:
            return False
    return True


cdef Py_ssize_t _checked_metadata(object entry, _Facts *facts) except -2:
    """The walk ``decode_entry`` and its kin share: the metadata's size when the entry is
    ``bytes`` whose metadata the walk accepts and whose checks (required fields, UTF-8 names,
    complete properties) pass, with ``facts`` filled in; -1 otherwise (the caller declines)."""
    cdef Py_ssize_t size
    cdef uint32_t metadata_size
    cdef const uint8_t *base
    if type(entry) is not bytes:
        return -1
    size = PyBytes_GET_SIZE(entry)
    base = <const uint8_t *>PyBytes_AS_STRING(entry)
    if size < 4:
        return -1
    metadata_size = _be32(base)
    if metadata_size > <uint64_t>(size - 4):
        return -1
    facts.name = NULL
    facts.key = NULL
    facts.uuid = NULL
    facts.name_size = facts.key_size = facts.uuid_size = 0
    facts.has_sequence = facts.has_publish_time = False
    facts.has_in_batch = facts.has_compression = False
    facts.num_chunks = 0
    if (
        not _walk_metadata(base + 4, base + 4 + metadata_size, facts)
        or facts.name == NULL
        or not facts.has_sequence
        or not facts.has_publish_time
        or not _utf8(facts.name, facts.name_size)
        or (facts.key != NULL and not _utf8(facts.key, facts.key_size))
        or not _complete_properties(base + 4, base + 4 + metadata_size)
    ):
        return -1
    return metadata_size


cdef inline object _metadata_bytes(object entry, Py_ssize_t metadata_size):
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(entry) + 4, metadata_size)


cdef inline object _payload_bytes(object entry, Py_ssize_t metadata_size):
    return PyBytes_FromStringAndSize(
        PyBytes_AS_STRING(entry) + 4 + metadata_size,
        PyBytes_GET_SIZE(entry) - 4 - metadata_size,
    )


cdef object _decoded(object entry, bint plain_wanted):
    """The body of ``decode_entry`` and ``decode_entry_plain``; None: the reference decides."""
    cdef _Facts facts
    cdef bint plain
    cdef Py_ssize_t metadata_size = _checked_metadata(entry, &facts)
    if metadata_size < 0:
        return None
    metadata = _MessageMetadata_FromString(_metadata_bytes(entry, metadata_size))
    payload = _payload_bytes(entry, metadata_size)
    if not plain_wanted:
        return metadata, payload
    # Encryption keys never pass the walk. The compression value is read back from the parsed
    # message: an enum value upb does not know reads as NONE there, as for the reference.
    plain = not facts.has_in_batch and facts.num_chunks == 0
    if plain and facts.has_compression:
        plain = metadata.compression == 0
    return metadata, payload, plain


def decode_plain_entry_lazily(entry):
    """``protocol.metadata.decode_plain_entry_lazily``: for one plain message (no batch, chunk,
    compression field or encryption), its metadata's bytes (the walk checked everything upb's
    parse and the reference check; the consumer parses them when the application first asks)
    and its payload; None for every other entry, and for anything the walk does not accept."""
    cdef _Facts facts
    cdef Py_ssize_t metadata_size = _checked_metadata(entry, &facts)
    if (
        metadata_size < 0
        or facts.has_in_batch
        or facts.num_chunks != 0
        or facts.has_compression
    ):
        return None
    return _metadata_bytes(entry, metadata_size), _payload_bytes(entry, metadata_size)


def decode_entry(entry):
    """``protocol.metadata.decode_entry``: the same results and errors. The metadata is parsed
    by upb as there; the checks around it (sizes, required fields, UTF-8 of the names) are done
    by the walk of the SEND path, and anything it does not accept goes to the reference."""
    decoded = _decoded(entry, False)
    return _reference_decode_entry(entry) if decoded is None else decoded


def decode_entry_plain(entry):
    """``protocol.metadata.decode_entry_plain``: ``decode_entry`` and whether the entry is one
    plain message (no batch, chunk, compression or encryption), from the walk's facts."""
    decoded = _decoded(entry, True)
    return _reference_decode_entry_plain(entry) if decoded is None else decoded


def bind_decode_entry(reference, reference_plain):
    global _reference_decode_entry, _reference_decode_entry_plain
    _reference_decode_entry = reference
    _reference_decode_entry_plain = reference_plain
    return decode_entry, decode_entry_plain


from cpython.mem cimport PyMem_Free, PyMem_Malloc


# --- ACK of whole entries (a consumer's grouped individual acknowledgements) -------------------

cdef enum:
    ACK_TYPE = 10


cdef inline void _ack_be32(uint8_t *p, uint32_t value) noexcept nogil:
    p[0] = <uint8_t>(value >> 24)
    p[1] = <uint8_t>(value >> 16)
    p[2] = <uint8_t>(value >> 8)
    p[3] = <uint8_t>value


cdef inline Py_ssize_t _ack_varint_size(uint64_t value) noexcept nogil:
    cdef Py_ssize_t size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def ack_entries(consumer_id, entries):
    """``protocol.commands.consumers.py_ack_entries``: the same bytes, written in one buffer."""
    cdef Py_ssize_t count = len(entries)
    cdef Py_ssize_t i, id_size, sub_size, body_size
    cdef uint64_t consumer = _u64(consumer_id)
    cdef uint64_t *keys
    cdef uint8_t *p
    cdef bytes out
    if count == 0:
        return _reference_ack_entries(consumer_id, entries)
    keys = <uint64_t *>PyMem_Malloc(2 * count * sizeof(uint64_t))
    if keys == NULL:
        raise MemoryError()
    try:
        # Sizes first (a MessageIdData is at most 22 bytes: its length is one byte).
        sub_size = 1 + _ack_varint_size(consumer) + 2
        for i in range(count):
            ledger, entry = entries[i]
            keys[2 * i] = _u64(ledger)
            keys[2 * i + 1] = _u64(entry)
            id_size = 2 + _ack_varint_size(keys[2 * i]) + _ack_varint_size(keys[2 * i + 1])
            sub_size += 2 + id_size
        body_size = 2 + 1 + _ack_varint_size(<uint64_t>sub_size) + sub_size
        out = PyBytes_FromStringAndSize(NULL, 8 + body_size)  # filled in below, then shared
        p = <uint8_t *>PyBytes_AS_STRING(out)
        _ack_be32(p, <uint32_t>(4 + body_size))
        _ack_be32(p + 4, <uint32_t>body_size)
        p += 8
        p[0] = 0x08
        p[1] = ACK_TYPE
        p[2] = 0x52  # field 10, length-delimited
        p = _put_varint(p + 3, <uint64_t>sub_size)
        p[0] = 0x08
        p = _put_varint(p + 1, consumer)
        p[0] = 0x10  # ack_type Individual
        p[1] = 0
        p += 2
        for i in range(count):
            p[0] = 0x1A
            p[1] = <uint8_t>(2 + _ack_varint_size(keys[2 * i]) + _ack_varint_size(keys[2 * i + 1]))
            p[2] = 0x08
            p = _put_varint(p + 3, keys[2 * i])
            p[0] = 0x10
            p = _put_varint(p + 1, keys[2 * i + 1])
    finally:
        PyMem_Free(keys)
    return out


cdef object _reference_ack_entries = None


def bind_ack_entries(reference):
    global _reference_ack_entries
    _reference_ack_entries = reference
    return ack_entries
