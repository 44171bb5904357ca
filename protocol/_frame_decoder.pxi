# The frame decoder (``protocol.framing.FrameDecoder``, compiled), its own file: it grew past
# what fits beside the rest of this module (issue #26: sockets read straight into a large
# SEND's entry, ``entry_window``).
cdef class FrameDecoder:
    """``protocol.framing.FrameDecoder`` with SEND frames decoded in C (see the module doc).

    ``assemble_over``: the frame size from which a SEND is assembled in place (tests lower it).
    """

    cdef bytearray _buffer
    cdef Py_ssize_t _offset
    cdef object _error
    cdef object _max_frame_size
    cdef uint64_t _limit
    cdef Py_ssize_t _assemble_over
    # A large SEND being assembled: its frame up to the entry, the entry's bytes (not shared
    # with anybody until the frame is returned) and how much of them has arrived.
    cdef bytes _head
    cdef bytes _entry
    cdef Py_ssize_t _filled

    def __init__(self, max_frame_size=5 * 1024 * 1024 + 10 * 1024, *,
                 Py_ssize_t assemble_over=DEFAULT_ASSEMBLE_OVER):
        if max_frame_size < 8:
            raise ValueError("max_frame_size must allow at least an empty command")
        self._max_frame_size = max_frame_size
        # totalSize is a u32: any larger limit admits every frame.
        self._limit = max_frame_size if max_frame_size < UINT32_MAX else UINT32_MAX
        self._buffer = bytearray()
        self._offset = 0
        self._error = None
        self._assemble_over = assemble_over
        self._head = None
        self._entry = None
        self._filled = 0

    @property
    def max_frame_size(self):
        return self._max_frame_size

    @property
    def buffered(self):
        """Number of received bytes not yet returned as frames."""
        cdef Py_ssize_t assembling = 0
        if self._entry is not None:
            assembling = PyBytes_GET_SIZE(self._head) + self._filled
        return assembling + PyByteArray_GET_SIZE(self._buffer) - self._offset

    def feed(self, data):
        """Append received bytes (RemoteProtocolError once the decoder has failed)."""
        cdef const uint8_t[::1] view
        cdef Py_ssize_t take
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        if self._entry is not None and self._filled < PyBytes_GET_SIZE(self._entry):
            view = data
            take = min(view.shape[0], PyBytes_GET_SIZE(self._entry) - self._filled)
            if take:
                memcpy(PyBytes_AS_STRING(self._entry) + self._filled, &view[0], take)
                self._filled += take
            if take == view.shape[0]:
                return
            data = view[take:]
        self._compact()
        self._buffer += data

    def entry_window(self):
        """A writable view of the bytes still missing from the large SEND being assembled, so
        the socket reads them straight into the entry (``broker.connection.core``); None when
        no such SEND is waiting for bytes. Valid until the next call on this decoder."""
        if self._error is not None or self._entry is None:
            return None
        if self._filled >= PyBytes_GET_SIZE(self._entry):
            return None
        return PyMemoryView_FromMemory(
            PyBytes_AS_STRING(self._entry) + self._filled,
            PyBytes_GET_SIZE(self._entry) - self._filled,
            PyBUF_WRITE,
        )

    def entry_received(self, Py_ssize_t count):
        """``count`` bytes were written into the view the last ``entry_window`` returned."""
        if self._entry is None or count < 0 or count > PyBytes_GET_SIZE(self._entry) - self._filled:
            raise ValueError(f"{count} bytes do not fit the entry window")
        self._filled += count

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t offset = self._offset
        cdef Py_ssize_t available
        cdef Py_ssize_t end
        cdef uint32_t total_size
        cdef const uint8_t *base
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        if self._entry is not None:
            if self._filled < PyBytes_GET_SIZE(self._entry):
                raise StopIteration
            return self._assembled()
        available = PyByteArray_GET_SIZE(self._buffer) - offset
        if available >= 4:
            base = <const uint8_t *>PyByteArray_AS_STRING(self._buffer)
            total_size = _be32(base + offset)
            if total_size > self._limit or total_size < 4:
                self._error = RemoteProtocolError(
                    f"frame size {total_size} outside [4, {self._max_frame_size}]"
                )
                raise self._error
            if available >= 4 + <Py_ssize_t>total_size:
                end = offset + 4 + total_size
                self._offset = end
                frame = _send_frame(base + offset + 4, base + end)
                if frame is not None:
                    return frame
                frame = _message_frame(base + offset + 4, base + end)
                if frame is not None:
                    return frame
                try:
                    return _decode_frame(self._buffer, offset + 4, end)
                except RemoteProtocolError as exc:
                    self._error = exc
                    raise
            if total_size >= self._assemble_over:
                self._start_assembly(base + offset, available, total_size)
        self._compact()
        raise StopIteration

    cdef _start_assembly(self, const uint8_t *frame, Py_ssize_t available, uint32_t total_size):
        """Move a large SEND's received part out of the buffer, into its entry's own bytes,
        once its head has arrived (else the buffer keeps it, as any frame)."""
        cdef SendFields fields = SendFields.__new__(SendFields)
        cdef bint has_checksum = False
        cdef uint32_t expected = 0
        cdef const uint8_t *start = frame + 4
        cdef const uint8_t *entry_start
        cdef Py_ssize_t head_size, entry_size, head_and_more
        if available < 8:
            return
        # The command, a checksum and a metadata size: all there, and inside the frame, so
        # ``_send_head`` reads the same bytes as it would in the whole frame.
        head_and_more = 8 + <Py_ssize_t>_be32(start) + 10
        if head_and_more > available or head_and_more > 4 + <Py_ssize_t>total_size:
            return
        entry_start = _send_head(start, frame + available, fields, &has_checksum, &expected)
        if entry_start == NULL:
            return
        head_size = entry_start - frame
        entry_size = 4 + <Py_ssize_t>total_size - head_size
        self._head = PyBytes_FromStringAndSize(<const char *>frame, head_size)
        self._entry = PyBytes_FromStringAndSize(NULL, entry_size)
        self._filled = available - head_size
        memcpy(PyBytes_AS_STRING(self._entry), entry_start, self._filled)
        self._offset += available  # every byte buffered belongs to this frame

    cdef object _assembled(self):
        """The Frame of the SEND assembled in place: as the buffer would have decoded it."""
        cdef bytes head = self._head
        cdef bytes entry = self._entry
        cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(head) + 4
        cdef const uint8_t *head_end = start - 4 + PyBytes_GET_SIZE(head)
        cdef SendFields fields = SendFields.__new__(SendFields)
        cdef bint has_checksum = False
        cdef uint32_t expected = 0
        self._head = None
        self._entry = None
        self._filled = 0
        if _send_head(start, head_end, fields, &has_checksum, &expected) == head_end:
            frame = _send_frame_of(start, head_end, entry,
                                   <const uint8_t *>PyBytes_AS_STRING(entry),
                                   PyBytes_GET_SIZE(entry), fields, has_checksum, expected)
            if frame is not None:
                return frame
        whole = bytearray(head)  # not the common layout after all: the reference decides
        whole += entry
        try:
            return _decode_frame(whole, 4, PyByteArray_GET_SIZE(whole))
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    cdef _compact(self):
        if self._offset:
            del self._buffer[: self._offset]
            self._offset = 0
