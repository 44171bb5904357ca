# MESSAGE frames for a run of entries to one consumer (included by _speedups.pyx): what a
# broker's dispatch writes most. ``protocol.dispatch_frames.py_encode_messages`` is the
# reference; this writes the same bytes (the protobuf encoding of BaseCommand{type MESSAGE,
# message}, fields in number order, ack_set words unpacked) into one buffer sized up front, so
# a run costs one allocation and no protobuf object per entry. An item it does not take (see
# ``_run_take``) sends the whole run to the reference, which then decides, errors included.

from cpython.bytes cimport PyBytes_CheckExact
from cpython.list cimport PyList_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_Check, PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t

cdef enum:
    RUN_INT32_MAX = 0x7FFFFFFF

cdef object _reference_encode_messages = None


cdef struct _RunItem:
    uint64_t ledger_id
    uint64_t entry_id
    uint64_t redelivery_count
    Py_ssize_t id_size        # MessageIdData bytes
    Py_ssize_t message_size   # CommandMessage bytes
    Py_ssize_t command_size   # BaseCommand bytes
    const char *entry
    Py_ssize_t entry_size
    PyObject *ack_set         # borrowed from the run (the run outlives the call); NULL: none


def bind_dispatch(reference_encode_messages):
    """Give the compiled encoder its reference (see ``protocol.dispatch_frames``)."""
    global _reference_encode_messages
    _reference_encode_messages = reference_encode_messages
    return encode_messages


cdef inline Py_ssize_t _run_varint_size(uint64_t value) noexcept nogil:
    cdef Py_ssize_t size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


cdef bint _run_u64(object value, uint64_t *out) except -1:
    """An exact int as its uint64 wire form (masked, as the reference's ``& U64_MASK``)."""
    if not PyLong_CheckExact(value):
        return False
    out[0] = _u64(value)
    return True


cdef bint _run_i64(object value, uint64_t *out) except -1:
    """An exact int in the signed 64-bit range (what ``MessageId`` takes) as its wire form."""
    cdef int overflow = 0
    cdef long long as_signed
    if not PyLong_CheckExact(value):
        return False
    as_signed = PyLong_AsLongLongAndOverflow(value, &overflow)
    out[0] = <uint64_t>as_signed
    return overflow == 0


cdef Py_ssize_t _run_ack_size(object ack_set) except -2:
    """Bytes of the ack_set fields (tag + varint per word); -1 when a word is no exact int."""
    cdef Py_ssize_t size = 0
    cdef uint64_t word
    for value in ack_set:
        if not _run_u64(value, &word):
            return -1
        size += 1 + _run_varint_size(word)
    return size


cdef bint _run_take(object item, _RunItem *out, Py_ssize_t partition_size) except -1:
    """Read one ``(position, entry, redelivery_count, ack_set)`` the fast path takes."""
    cdef object position, entry, count, ack_set
    cdef Py_ssize_t ack_size = 0
    if not PyTuple_Check(item) or PyTuple_GET_SIZE(item) != 4:
        return False
    position = <object>PyTuple_GET_ITEM(item, 0)
    entry = <object>PyTuple_GET_ITEM(item, 1)
    count = <object>PyTuple_GET_ITEM(item, 2)
    ack_set = <object>PyTuple_GET_ITEM(item, 3)
    if not PyTuple_Check(position) or PyTuple_GET_SIZE(position) != 2:
        return False
    if not _run_i64(<object>PyTuple_GET_ITEM(position, 0), &out.ledger_id):
        return False
    if not _run_i64(<object>PyTuple_GET_ITEM(position, 1), &out.entry_id):
        return False
    # The reference refuses an entry without its 4-byte metadata size; other buffer types
    # (memoryview, bytearray) are rare enough to leave to it.
    if not PyBytes_CheckExact(entry) or PyBytes_GET_SIZE(entry) < 4:
        return False
    if not PyLong_CheckExact(count) or count < 0 or count > UINT32_MAX:
        return False
    out.redelivery_count = PyLong_AsUnsignedLongLong(count)
    out.ack_set = NULL
    if ack_set is not None:
        if not (PyList_CheckExact(ack_set) or PyTuple_CheckExact(ack_set)):
            return False
        if len(ack_set):
            ack_size = _run_ack_size(ack_set)
            if ack_size < 0:
                return False
            out.ack_set = <PyObject *>ack_set
    out.entry = PyBytes_AS_STRING(entry)
    out.entry_size = PyBytes_GET_SIZE(entry)
    out.id_size = (2 + _run_varint_size(out.ledger_id) + _run_varint_size(out.entry_id)
                   + partition_size)
    out.message_size = 1 + _run_varint_size(out.id_size) + out.id_size + ack_size
    if out.redelivery_count:
        out.message_size += 1 + _run_varint_size(out.redelivery_count)
    return True


cdef inline uint8_t *_run_be32(uint8_t *p, uint32_t value) noexcept nogil:
    p[0] = <uint8_t>(value >> 24)
    p[1] = <uint8_t>(value >> 16)
    p[2] = <uint8_t>(value >> 8)
    p[3] = <uint8_t>value
    return p + 4


cdef uint8_t *_run_frame(uint8_t *p, _RunItem *item, uint64_t consumer_id,
                         Py_ssize_t consumer_size, int64_t partition) except NULL:
    """One MESSAGE frame: sizes, BaseCommand, magic, CRC-32C of the entry, the entry."""
    cdef uint64_t word
    p = _run_be32(p, <uint32_t>(item.command_size + 10 + item.entry_size))
    p = _run_be32(p, <uint32_t>item.command_size)
    p[0] = 0x08  # type = MESSAGE
    p[1] = 9
    p[2] = 0x4A  # message (field 9, length-delimited)
    p = _put_varint(p + 3, <uint64_t>item.message_size)
    p[0] = 0x08  # consumer_id
    p = _put_varint(p + 1, consumer_id)
    p[0] = 0x12  # message_id
    p = _put_varint(p + 1, <uint64_t>item.id_size)
    p[0] = 0x08
    p = _put_varint(p + 1, item.ledger_id)
    p[0] = 0x10
    p = _put_varint(p + 1, item.entry_id)
    if partition >= 0:
        p[0] = 0x18
        p = _put_varint(p + 1, <uint64_t>partition)
    if item.redelivery_count:
        p[0] = 0x18  # redelivery_count
        p = _put_varint(p + 1, item.redelivery_count)
    if item.ack_set != NULL:
        for value in <object>item.ack_set:
            p[0] = 0x20  # ack_set, one unpacked int64 per word (two's complement)
            p = _put_varint(p + 1, _u64(value))
    p[0] = 0x0E  # magic of the checksum
    p[1] = 0x01
    p = _run_be32(p + 2, magnetar_crc32c(0, <const uint8_t *>item.entry, item.entry_size))
    memcpy(p, item.entry, item.entry_size)
    return p + item.entry_size


def encode_messages(consumer_id, partition, run):
    """``protocol.dispatch_frames.py_encode_messages``: the same bytes, in one C buffer."""
    cdef Py_ssize_t count, index, total = 0, partition_size = 0, consumer_size
    cdef uint64_t consumer
    cdef int64_t part = -1
    cdef _RunItem *items
    cdef _RunItem *item
    cdef uint8_t *p
    cdef object result
    if not _run_u64(consumer_id, &consumer) or not PyLong_CheckExact(partition):
        return _reference_encode_messages(consumer_id, partition, run)
    if partition >= 0:
        if partition > RUN_INT32_MAX:
            return _reference_encode_messages(consumer_id, partition, run)
        part = partition
        partition_size = 1 + _run_varint_size(<uint64_t>part)
    if not (PyList_CheckExact(run) or PyTuple_CheckExact(run)):
        return _reference_encode_messages(consumer_id, partition, run)
    count = len(run)
    if count == 0:
        return b""
    consumer_size = 1 + _run_varint_size(consumer)
    items = <_RunItem *>PyMem_Malloc(count * sizeof(_RunItem))
    if items == NULL:
        raise MemoryError()
    try:
        for index in range(count):
            item = &items[index]
            if not _run_take(run[index], item, partition_size):
                return _reference_encode_messages(consumer_id, partition, run)
            item.message_size += consumer_size
            item.command_size = 3 + _run_varint_size(<uint64_t>item.message_size) + item.message_size
            total += 8 + item.command_size + 6 + item.entry_size
        result = PyBytes_FromStringAndSize(NULL, total)
        p = <uint8_t *>PyBytes_AS_STRING(result)
        for index in range(count):
            p = _run_frame(p, &items[index], consumer, consumer_size, part)
        return result
    finally:
        PyMem_Free(items)
