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


# The publish path's one object per accepted SEND, compiled (issue #26). The reference is
# broker/publish/publication.py: PyPublication.

cdef class Publication:
    """``broker.publish.publication.PyPublication``, compiled: the one object per accepted SEND
    (issue #26). Its construction and field reads cost a fraction of a Python instance's."""

    cdef public object producer
    cdef public object highest_sequence_id
    cdef public object entry
    cdef public long long chunk_id
    cdef public double staged_at
    cdef public object on_settled
    cdef public object future
    cdef public object position
    cdef public object error
    cdef public bint done
    cdef public object ticket
    cdef public long long entry_crc

    def __init__(self, producer, highest_sequence_id, entry, long long chunk_id,
                 double staged_at, on_settled, future, long long entry_crc=-1):
        self.producer = producer
        self.highest_sequence_id = highest_sequence_id
        self.entry = entry
        self.chunk_id = chunk_id
        self.staged_at = staged_at
        self.on_settled = on_settled
        self.future = future
        self.position = None
        self.error = None
        self.done = False
        self.ticket = None
        self.entry_crc = entry_crc

    def resolve(self, position):
        self.position = position
        self.done = True
        future = self.future
        if future is not None and not future.done():
            future.set_result(position)

    def fail(self, error):
        self.error = error
        self.position = None
        self.done = True
        future = self.future
        if future is not None and not future.done():
            future.set_exception(error)


# A durable group's settling, compiled (issue #26). The reference is broker/publish/settle.py:
# py_settle_durable. Per publication the Python loop paid a latency observation (a method call
# and a bisect) and the ``done`` store; here it is one call per group. (A group's idempotency
# keys are made durable just before, by the window: ``KeyGate.persist_group``.)

def settle_durable(list group not None, double durable_at, tuple bounds not None):
    """``broker.publish.settle.py_settle_durable``: the same stores, calls and tally."""
    cdef Py_ssize_t nbounds = len(bounds), b
    cdef double latency, total = 0.0
    cdef double *limits = <double *>PyMem_Malloc((nbounds + 1) * sizeof(double))
    cdef Py_ssize_t *tally = <Py_ssize_t *>PyMem_Malloc((nbounds + 1) * sizeof(Py_ssize_t))
    cdef Publication typed
    try:
        if limits == NULL or tally == NULL:
            raise MemoryError()
        for b in range(nbounds):
            limits[b] = bounds[b]
            tally[b] = 0
        tally[nbounds] = 0
        for write in group:
            if type(write) is Publication:  # the compiled class: its fields directly
                typed = <Publication>write
                position = typed.position
                latency = (durable_at - typed.staged_at) * 1000.0
                future = typed.future
            else:
                position = write.position
                latency = (durable_at - <double>write.staged_at) * 1000.0
                future = write.future
            b = 0  # bisect_left: the first bound >= latency (a handful of bounds: a scan)
            while b < nbounds and limits[b] < latency:
                b += 1
            tally[b] += 1
            total += latency
            if future is not None:
                write.resolve(position)
            elif type(write) is Publication:  # a connection's SEND: `resolve` without the future
                (<Publication>write).done = True
            else:
                write.done = True
        return [tally[b] for b in range(nbounds + 1)], total
    finally:
        PyMem_Free(limits)
        PyMem_Free(tally)


# The group commit's other per-publication loops (references in broker/publish/settle.py).

def group_entries(list group not None):
    """``py_group_entries``: the entries of ``group`` and their CRCs, in order, for the ledger."""
    cdef Py_ssize_t i, n = len(group)
    cdef list entries = [None] * n
    cdef list crcs = [None] * n
    for i in range(n):
        write = group[i]
        if type(write) is Publication:
            entries[i] = (<Publication>write).entry
            crcs[i] = (<Publication>write).entry_crc
        else:
            entries[i] = write.entry
            crcs[i] = write.entry_crc
    return entries, crcs


def place_group(list group not None, positions):
    """``py_place_group``: each publication's position, from the ledger's append."""
    cdef list placed = positions if type(positions) is list else list(positions)
    cdef Py_ssize_t i, n = len(group)
    if len(placed) != n:
        raise ValueError(f"{len(placed)} positions for {n} publications")
    for i in range(n):
        write = group[i]
        if type(write) is Publication:
            (<Publication>write).position = placed[i]
        else:
            write.position = placed[i]


def move_dedup_marks(dedup, list group not None):
    """``py_move_dedup_marks``: the same calls into ``dedup``, with the same arguments."""
    cdef Py_ssize_t run_count = 0
    cdef long long chunk_id
    cdef Publication typed
    run_name = run_highest = run_end = None
    for write in group:
        if type(write) is Publication:
            typed = <Publication>write
            producer, highest, position = typed.producer, typed.highest_sequence_id, typed.position
            chunk_id = typed.chunk_id
        else:
            producer, highest, position = write.producer, write.highest_sequence_id, write.position
            chunk_id = write.chunk_id
        name = producer.name
        if chunk_id < 0 and run_count and name == run_name:
            if highest > run_highest:
                run_highest = highest
            run_count += 1
            run_end = position
            continue
        if run_count:
            dedup.on_persisted(run_name, run_highest, run_end, run_count)
            run_count = 0
        if chunk_id >= 0:  # a chunk that is not its message's last: its own progress
            dedup.on_chunk_persisted(name, highest, chunk_id, position)
        else:
            run_name, run_highest, run_count, run_end = name, highest, 1, position
    if run_count:
        dedup.on_persisted(run_name, run_highest, run_end, run_count)
