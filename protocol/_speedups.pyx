# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled SEND path: the same API as the pure-Python reference it stands in for.

What it replaces (``protocol/_accel.py`` decides which one the package exports):

* ``FrameDecoder`` (``protocol.framing``): frame split and sizes, and for SEND frames (what a
  broker receives) and MESSAGE frames (what a client receives) the whole decode: the command's
  fields by a varint walk, the payload section, the CRC-32C;
* ``SendEntryChecker`` (``protocol.metadata``): the ``MessageMetadata`` fields the broker checks;
* ``of_send`` (``protocol.send_identity``): the dedup identity, computed while decoding;
* ``ReceiptEncoder`` (``protocol.receipts``): SEND_RECEIPT bytes;
* ``crc32c`` (``protocol.checksum``).

Rule of the fast paths: they take only input they fully understand (the layout every client
writes: fields of the expected wire types, no groups, varints of at most 64 bits) and hand
anything else, valid or not, to the reference on the same bytes. So a verdict that is not a
success, and every error message, comes from the reference: the two cannot disagree on
malformed input, and the property tests (tests/protocol/test_speedups*.py) check the rest.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITE, PyBuffer_Release, PyObject_GetBuffer
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport UINT32_MAX, UINT64_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from crc32c import crc32c as _package_crc32c

from protocol._pb import PulsarApi_pb2 as _pb
from protocol.errors import RemoteProtocolError


cdef extern from "_crc32c.h":
    void magnetar_crc32c_init()
    uint32_t magnetar_crc32c(uint32_t value, const uint8_t *data, size_t size) nogil
    uint32_t magnetar_crc32c_sw(uint32_t value, const uint8_t *data, size_t size) nogil
    uint32_t magnetar_crc32c_x8n(uint64_t count) nogil
    uint32_t magnetar_crc32c_combine_with(uint32_t power, uint32_t crc_a, uint32_t crc_b) nogil
    int magnetar_crc32c_hw

magnetar_crc32c_init()

cdef enum:
    SEND_TYPE = 6
    MAGIC_CRC32C = 0x0E01
    MAGIC_BROKER_ENTRY_METADATA = 0x0E02
    MAX_CHUNKS = 1 << 20

cdef object _U64_MASK = (1 << 64) - 1

# Set by bind_*: the reference pieces the fast paths fall back to. Passed in (not imported) so
# that the reference modules can pick this module without an import circle.
cdef object _Frame = None
cdef object _decode_frame = None
cdef object _ReferenceChecker = None
cdef object _ChunkInfo = None
cdef object _reference_of_send = None


def hardware_crc32c():
    """True when the CRC-32C runs on the SSE4.2 instruction (else on tables)."""
    return bool(magnetar_crc32c_hw)


include "_wire.pxi"


# --- SEND frames ------------------------------------------------------------------------------

cdef class SendCommand


cdef dict _SEND_FIELD_BITS = {
    "producer_id": 1 << 1,
    "sequence_id": 1 << 2,
    "num_messages": 1 << 3,
    "txnid_least_bits": 1 << 4,
    "txnid_most_bits": 1 << 5,
    "highest_sequence_id": 1 << 6,
    "is_chunk": 1 << 7,
    "marker": 1 << 8,
}


cdef class SendFields:
    """The ``CommandSend`` of a SEND the compiled decoder recognised: the fields the broker reads
    as plain attributes, ``HasField`` for them; any other attribute comes from a protobuf parse
    of the command's bytes, made once on first use (never on the broker's path)."""

    cdef readonly uint64_t producer_id
    cdef readonly uint64_t sequence_id
    cdef readonly int32_t num_messages
    cdef readonly uint64_t txnid_least_bits
    cdef readonly uint64_t txnid_most_bits
    cdef readonly uint64_t highest_sequence_id
    cdef readonly bint is_chunk
    cdef readonly bint marker
    cdef uint32_t _present  # bit n: field number n was on the wire
    # The command's bytes, parsed here when an uncommon field is asked for, rather than a
    # pointer back at the SendCommand: that cycle made every SEND garbage only the cyclic
    # collector frees (as the consumer's MESSAGE objects were, issue #23).
    cdef bytes _raw
    cdef object _parsed

    cdef object _full(self):
        if self._parsed is None:
            self._parsed = _pb.BaseCommand.FromString(self._raw).send
        return self._parsed

    def HasField(self, name):
        bit = _SEND_FIELD_BITS.get(name)
        if bit is None:
            return self._full().HasField(name)
        return (self._present & <uint32_t>bit) != 0

    def __getattr__(self, name):
        return getattr(self._full(), name)

    def __eq__(self, other):
        return self._full() == other

    def __repr__(self):
        return repr(self._full())

    cdef tuple identity(self):
        """``of_send``: (sequence id, highest sequence id, num_messages)."""
        cdef uint64_t sequence = self.sequence_id
        cdef uint64_t extra
        if self._present & (1 << 6):
            highest = self.highest_sequence_id if self.highest_sequence_id > sequence else sequence
        else:
            extra = <uint64_t>(self.num_messages - 1) if self.num_messages > 1 else 0
            if sequence <= UINT64_MAX - extra:
                highest = sequence + extra
            else:  # past 2**64 - 1: the reference's Python int does not wrap
                highest = <object>sequence + <object>extra
        return (sequence, highest, self.num_messages)


cdef class SendCommand:
    """A SEND's ``BaseCommand`` as the compiled decoder gives it: ``type`` and ``send`` at once,
    the rest of the protobuf API from a parse of the command bytes on first use."""

    cdef readonly SendFields send
    cdef bytes _raw
    cdef object _parsed

    @property
    def type(self):
        return SEND_TYPE

    def _full(self):
        if self._parsed is None:
            self._parsed = _pb.BaseCommand.FromString(self._raw)
        return self._parsed

    def HasField(self, name):
        if name == "type" or name == "send":
            return True
        return self._full().HasField(name)

    def __getattr__(self, name):
        return getattr(self._full(), name)

    def __eq__(self, other):
        if isinstance(other, SendCommand):
            other = (<SendCommand>other)._full()
        return self._full() == other

    def __repr__(self):
        return repr(self._full())


cdef bint _parse_send(const uint8_t *p, const uint8_t *end, SendFields fields) noexcept:
    """Walk a CommandSend; False when anything is not the common layout."""
    cdef uint32_t field, wire
    cdef uint64_t value
    fields.num_messages = 1  # the proto default
    while p < end:
        p = _tag(p, end, &field, &wire)
        if p == NULL:
            return False
        if field > 9:  # unknown to this schema: kept aside by upb, ignored here
            p = _skip(p, end, wire)
            if p == NULL:
                return False
            continue
        if wire != 0 or field == 9:  # message_id (nested, with required fields): reference
            return False
        p = _varint(p, end, &value)
        if p == NULL:
            return False
        fields._present |= <uint32_t>1 << field
        if field == 1:
            fields.producer_id = value
        elif field == 2:
            fields.sequence_id = value
        elif field == 3:
            fields.num_messages = <int32_t><uint32_t>value
        elif field == 4:
            fields.txnid_least_bits = value
        elif field == 5:
            fields.txnid_most_bits = value
        elif field == 6:
            fields.highest_sequence_id = value
        elif field == 7:
            fields.is_chunk = value != 0
        else:
            fields.marker = value != 0
    # IsInitialized: both required fields present, else the reference raises its error.
    return (fields._present & 0b110) == 0b110


cdef const uint8_t *_send_head(const uint8_t *start, const uint8_t *end, SendFields fields,
                               bint *has_checksum, uint32_t *expected):
    """Parse a SEND's command (``start`` is just past totalSize) and its checksum; where its
    entry starts, or NULL: not the layout recognised here (the reference decides)."""
    cdef uint32_t command_size = _be32(start)
    cdef const uint8_t *command = start + 4
    cdef const uint8_t *command_end
    cdef const uint8_t *p
    cdef Py_ssize_t size
    cdef uint32_t magic
    if command_size > <uint64_t>(end - command) or command_size < 4:
        return NULL
    command_end = command + command_size
    # type = SEND, then the send sub-message up to the command's end: what every client writes.
    if command[0] != 0x08 or command[1] != SEND_TYPE or command[2] != 0x32:
        return NULL
    p = _length(command + 3, command_end, &size)
    if p == NULL or p + size != command_end:
        return NULL
    if not _parse_send(p, command_end, fields):
        return NULL
    p = command_end
    has_checksum[0] = False
    if end - p >= 6:
        magic = (p[0] << 8) | p[1]
        if magic == MAGIC_BROKER_ENTRY_METADATA:  # only MESSAGE frames carry it
            return NULL
        if magic == MAGIC_CRC32C:
            expected[0] = _be32(p + 2)
            has_checksum[0] = True
            p += 6
    return p


cdef object _send_frame_of(const uint8_t *start, const uint8_t *entry_start, object entry,
                           const uint8_t *entry_data, Py_ssize_t entry_size,
                           SendFields fields, bint has_checksum, uint32_t expected):
    """The Frame of a SEND parsed by ``_send_head``, its entry ``entry`` (None: copy it from
    ``entry_data``), or None when the metadata size does not fit."""
    cdef uint32_t command_size = _be32(start)
    cdef uint32_t metadata_size
    cdef SendCommand parsed
    if entry_size < 4:
        return None
    metadata_size = _be32(entry_data)
    if metadata_size > <uint64_t>(entry_size - 4):
        return None
    if entry is None:
        entry = PyBytes_FromStringAndSize(<const char *>entry_data, entry_size)
    checksum_valid = (not has_checksum) or magnetar_crc32c(0, entry_data, entry_size) == expected
    parsed = SendCommand.__new__(SendCommand)
    parsed._raw = PyBytes_FromStringAndSize(<const char *>start + 4, command_size)
    parsed.send = fields
    fields._raw = parsed._raw
    # A verified checksum is the entry's CRC: storage reuses it (``Frame.entry_crc``).
    entry_crc = <int64_t>expected if has_checksum and checksum_valid else -1
    return _Frame(parsed, SEND_TYPE, entry, checksum_valid, has_checksum, entry_crc)


cdef object _send_frame(const uint8_t *start, const uint8_t *end):
    """The Frame of a SEND in ``[start, end)`` (after totalSize), or None: not recognised."""
    cdef SendFields fields = SendFields.__new__(SendFields)
    cdef bint has_checksum = False
    cdef uint32_t expected = 0
    cdef const uint8_t *p = _send_head(start, end, fields, &has_checksum, &expected)
    if p == NULL:
        return None
    return _send_frame_of(start, p, None, p, end - p, fields, has_checksum, expected)


# A SEND at least this large (a batch entry) is assembled straight into its entry's bytes as
# its reads arrive, instead of being appended to the buffer, moved down by each compaction and
# copied out at the end: one copy of the payload instead of three (P1 of issue #26).
DEFAULT_ASSEMBLE_OVER = 65536


include "_frame_decoder.pxi"


def bind_framing(frame_class, decode_frame):
    """Give the decoder the reference's ``Frame`` and ``_decode_frame``; returns the class."""
    global _Frame, _decode_frame
    _Frame = frame_class
    _decode_frame = decode_frame
    return FrameDecoder


# --- the dedup identity -----------------------------------------------------------------------

def of_send(send):
    """``send_identity.of_send``: read off the decoded fields for a SEND decoded here."""
    if type(send) is SendFields:
        return (<SendFields>send).identity()
    return _reference_of_send(send)


def bind_send_identity(reference_of_send):
    global _reference_of_send
    _reference_of_send = reference_of_send
    return of_send


include "_metadata.pxi"
include "_message.pxi"


# --- SEND_RECEIPT -----------------------------------------------------------------------------

cdef inline uint64_t _u64(object value) except? 0xFFFFFFFFFFFFFFFFULL:
    """An id as its uint64 wire form (-1 -> 2**64 - 1), as ``receipts.encode_varint``."""
    cdef int overflow = 0
    cdef long long as_signed = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow == 0:
        return <uint64_t>as_signed
    return PyLong_AsUnsignedLongLong(value & _U64_MASK)


cdef inline uint8_t *_put_varint(uint8_t *p, uint64_t value) noexcept nogil:
    while value >= 0x80:
        p[0] = <uint8_t>((value & 0x7F) | 0x80)
        p += 1
        value >>= 7
    p[0] = <uint8_t>value
    return p + 1


cdef class ReceiptEncoder:
    """``protocol.receipts.ReceiptEncoder``: the same bytes, written in one C buffer."""

    cdef uint64_t _producer_id

    def __init__(self, producer_id):
        self._producer_id = _u64(producer_id)

    def receipt(self, sequence_id, ledger_id, entry_id, highest_sequence_id):
        """The whole SEND_RECEIPT frame (see ``protocol.receipts`` for the layout)."""
        cdef uint8_t frame[96]
        cdef uint8_t message_id[24]
        cdef uint8_t *p
        cdef uint8_t *q = message_id
        cdef Py_ssize_t sub_size, body_size
        q[0] = 0x08
        q = _put_varint(q + 1, _u64(ledger_id))
        q[0] = 0x10
        q = _put_varint(q + 1, _u64(entry_id))
        # Sub-message after [totalSize][commandSize] 08 07 3a <len>: at most 2+11+11+24+11 bytes
        # (one length byte), so it starts at 12.
        p = frame + 12
        p[0] = 0x08
        p = _put_varint(p + 1, self._producer_id)
        p[0] = 0x10
        p = _put_varint(p + 1, _u64(sequence_id))
        p[0] = 0x1A
        p[1] = <uint8_t>(q - message_id)
        p += 2
        memcpy(p, message_id, q - message_id)
        p += q - message_id
        p[0] = 0x20
        p = _put_varint(p + 1, _u64(highest_sequence_id))
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
        return PyBytes_FromStringAndSize(<const char *>frame, 12 + sub_size)


# --- CRC-32C ----------------------------------------------------------------------------------

def crc32c(data, value=0):
    """``protocol.checksum.crc32c``: the CRC-32C of ``data``, continuing from ``value``."""
    cdef Py_buffer view
    cdef uint32_t start
    cdef uint32_t result
    if type(value) is not int or not 0 <= value <= 0xFFFFFFFF:
        return _package_crc32c(data, value)  # its own verdict on odd values
    start = value
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError, ValueError):
        return _package_crc32c(data, value)  # not a contiguous buffer: its own error
    try:
        result = magnetar_crc32c(start, <const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c_tables(data, uint32_t value=0):
    """The table-driven CRC-32C, whatever the CPU (tests compare it with the package)."""
    cdef Py_buffer view
    cdef uint32_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        result = magnetar_crc32c_sw(value, <const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return result


include "_batch_builder.pxi"
include "_dispatch.pxi"
include "_keys.pxi"
include "_key_table.pxi"
include "_columns.pxi"
include "_rowhash.pxi"
include "_gather.pxi"
include "_entry_metadata.pxi"
include "_acked_positions.pxi"
include "_records.pxi"
include "_send_path.pxi"
include "_split_batch.pxi"
include "_idem_window.pxi"
