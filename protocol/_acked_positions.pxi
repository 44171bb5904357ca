# acked_positions: the message ids of a received ACK, read by a varint walk of the command's
# bytes (included in _speedups.pyx). upb parsed the ACK already; reading its repeated
# MessageIdData back through Python objects cost about 3 µs per id (a wrapper per id, a list per
# ack set, the signed conversions), where serializing it again and walking the bytes costs a
# twentieth of that.

from libc.stdint cimport int64_t


cdef object _reference_acked_positions = None


cdef bint _walk_message_id(const uint8_t *p, const uint8_t *end, uint64_t *ledger,
                           uint64_t *entry, list ack_set) except -1:
    """One MessageIdData: its ledger and entry ids, and its ack set appended to ``ack_set``;
    False for anything but the layout upb writes (the reference decides)."""
    cdef uint32_t field, wire
    cdef uint64_t value
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if wire != 0:
            if field == 1 or field == 2 or field == 5:
                return False  # a packed ack set or a wrong wire type: the reference decides
            p = _skip(p, end, wire)
            if p == NULL:
                return False
            continue
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        if field == 1:
            ledger[0] = value
        elif field == 2:
            entry[0] = value
        elif field == 5:
            ack_set.append(<int64_t>value)
    return True


cdef object _walk_ack(const uint8_t *p, const uint8_t *end, object position, bint as_tuple):
    """The (position, ack set) pairs of a CommandAck's bytes; None: the reference decides."""
    cdef uint32_t field, wire
    cdef Py_ssize_t size
    cdef uint64_t ledger, entry
    cdef list result = []
    cdef list ack_set
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return None
        if field != 3:
            p = _skip(p, end, wire)
            if p == NULL:
                return None
            continue
        if wire != 2:
            return None
        p = _length(p, end, &size)
        if p == NULL:
            return None
        ledger = entry = 0
        ack_set = []
        if not _walk_message_id(p, p + size, &ledger, &entry, ack_set):
            return None
        p += size
        if as_tuple:
            where = tuple.__new__(position, (<int64_t>ledger, <int64_t>entry))
        else:
            where = position(<int64_t>ledger, <int64_t>entry)
        result.append((where, ack_set if ack_set else None))
    return result


def acked_positions(ack, position):
    """``protocol.commands.consumers.acked_positions``: the same pairs, from the bytes of the
    parsed ACK. A ``position`` that is a tuple type (a NamedTuple) is built directly."""
    cdef bytes raw = ack.SerializePartialToString()
    as_tuple = isinstance(position, type) and issubclass(position, tuple)
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(raw)
    pairs = _walk_ack(base, base + PyBytes_GET_SIZE(raw), position, as_tuple)
    return _reference_acked_positions(ack, position) if pairs is None else pairs


def bind_acked_positions(reference):
    global _reference_acked_positions
    _reference_acked_positions = reference
    return acked_positions
