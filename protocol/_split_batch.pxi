# split_batch: a batch payload's records as (parsed header, payload) pairs, compiled (included
# in _speedups.pyx). The reference is protocol.batch.py_split_batch: same records, checks and
# error messages; tests/protocol/test_batch.py holds both to that on generated payloads. The
# consumer calls it once per batch entry received; the Python loop cost ~0.3 us per message of
# a blocking consumer's ~3 (issue #23): the parse of each header stays upb's.

cdef object _parse_single_message = _pb.SingleMessageMetadata.FromString


def split_batch(payload, count=None):
    """``protocol.batch.split_batch``, compiled."""
    cdef bytes data = payload if type(payload) is bytes else bytes(payload)
    cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t position = 0, header_size, header_end, payload_end, parsed = 0
    cdef object limit = (1 << 62) if count is None else count + 1
    cdef list records = []
    cdef bint exhausted = True  # every allowed record parsed (the reference's for/else)
    while parsed < limit:
        if position >= end:
            exhausted = False
            break
        if end - position < 4:
            raise RemoteProtocolError(f"truncated batch record header at offset {position}")
        header_size = <Py_ssize_t>_be32(base + position)
        header_end = position + 4 + header_size
        if header_end > end:
            raise RemoteProtocolError(f"batch record metadata at offset {position} is truncated")
        try:
            meta = _parse_single_message(
                PyBytes_FromStringAndSize(<const char *>base + position + 4, header_size)
            )
        except Exception as exc:  # upb DecodeError
            raise RemoteProtocolError(f"bad SingleMessageMetadata at offset {position}") from exc
        # payload_size is the one required field: a header that starts with its tag (field 3,
        # varint: 0x18, as every client writes it) has it; any other must be initialized.
        if (header_size == 0 or base[position + 4] != 0x18) and not meta.IsInitialized():
            raise RemoteProtocolError(f"batch record at offset {position} lacks a payload size")
        payload_end = header_end + <Py_ssize_t>meta.payload_size
        if payload_end > end or payload_end < header_end:
            raise RemoteProtocolError(f"batch record payload at offset {position} is truncated")
        records.append((meta, PyBytes_FromStringAndSize(<const char *>base + header_end,
                                                        payload_end - header_end)))
        position = payload_end
        parsed += 1
    if exhausted and position < end:
        raise RemoteProtocolError(f"batch holds more than the {count} messages it declares")
    if count is not None and len(records) != count:
        raise RemoteProtocolError(f"batch holds {len(records)} messages, expected {count}")
    return records
