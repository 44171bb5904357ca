# The SEND path's receipts, compiled (issue #26; included by _speedups.pyx). The reference is
# protocol/receipts.py: py_take_settled_receipts. One call writes the receipts of a whole
# settled run of a producer's SENDs into one buffer, where the Python loop paid a tuple unpack,
# three attribute reads, a method call and a list append per receipt.

from cpython.mem cimport PyMem_Free, PyMem_Malloc

DEF _RECEIPT_MAX = 96  # 12 bytes of header + at most 2 + 11 + 11 + 24 + 11 of sub-message


cdef Py_ssize_t _write_receipt(uint8_t *frame, uint64_t producer_id, uint64_t sequence_id,
                               uint64_t ledger_id, uint64_t entry_id,
                               uint64_t highest_sequence_id) noexcept nogil:
    """One SEND_RECEIPT frame at ``frame`` (the layout of ``protocol.receipts``); its size."""
    cdef uint8_t message_id[24]
    cdef uint8_t *q = message_id
    cdef uint8_t *p = frame + 12  # the sub-message's length fits one byte: it starts at 12
    cdef Py_ssize_t sub_size, body_size
    q[0] = 0x08
    q = _put_varint(q + 1, ledger_id)
    q[0] = 0x10
    q = _put_varint(q + 1, entry_id)
    p[0] = 0x08
    p = _put_varint(p + 1, producer_id)
    p[0] = 0x10
    p = _put_varint(p + 1, sequence_id)
    p[0] = 0x1A
    p[1] = <uint8_t>(q - message_id)
    p += 2
    memcpy(p, message_id, q - message_id)
    p += q - message_id
    p[0] = 0x20
    p = _put_varint(p + 1, highest_sequence_id)
    sub_size = p - (frame + 12)
    body_size = 4 + sub_size
    frame[0] = <uint8_t>((body_size + 4) >> 24)
    frame[1] = <uint8_t>((body_size + 4) >> 16)
    frame[2] = <uint8_t>((body_size + 4) >> 8)
    frame[3] = <uint8_t>(body_size + 4)
    frame[4] = frame[5] = frame[6] = 0
    frame[7] = <uint8_t>body_size
    frame[8] = 0x08
    frame[9] = 0x07
    frame[10] = 0x3A
    frame[11] = <uint8_t>sub_size
    return 12 + sub_size


def take_settled_receipts(producer_id, pending):
    """``protocol.receipts.py_take_settled_receipts``: the same frames, popped the same way."""
    cdef Py_ssize_t count = 0, size = 0, i
    cdef uint64_t producer = _u64(producer_id)
    cdef uint64_t ledger_id, entry_id
    cdef uint8_t *buffer
    for item in pending:  # the settled prefix without an error: what this call answers
        outcome = item[2]
        if not outcome.done or outcome.error is not None:
            break
        count += 1
    if count == 0:
        return b"", 0
    buffer = <uint8_t *>PyMem_Malloc(count * _RECEIPT_MAX)
    if buffer == NULL:
        raise MemoryError()
    try:
        popleft = pending.popleft
        for i in range(count):
            sequence_id, highest_sequence_id, outcome = popleft()
            position = outcome.position
            if position is None:  # a PIP-6 duplicate: message id -1:-1
                ledger_id = entry_id = UINT64_MAX
            else:
                ledger_id = _u64(position[0])
                entry_id = _u64(position[1])
            size += _write_receipt(buffer + size, producer, _u64(sequence_id), ledger_id,
                                   entry_id, _u64(highest_sequence_id))
        return PyBytes_FromStringAndSize(<const char *>buffer, size), count
    finally:
        PyMem_Free(buffer)
