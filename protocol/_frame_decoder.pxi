# The frame decoder (``protocol.framing.FrameDecoder``, compiled), its own file: it grew past
# what fits beside the rest of this module (issue #26: sockets read straight into a large
# SEND's entry, ``entry_window``).
#
# Frames are decoded as their bytes are fed, straight from the caller's buffer (the connection's
# per-thread inbox): a complete frame is never copied into this decoder's own buffer first.
# Only a frame cut by the end of a read is kept, in ``_buffer`` (completed by the next feed, a
# few bytes copied) or, for a large SEND, in its entry's bytes (``entry_window``). Decoded frames
# wait in ``_ready`` for the iteration, and an error waits behind the frames before it, so the
# caller sees frames and errors in the order of the stream, as the reference gives them. On P1
# of issue #26 the copy into the buffer was half of the event loop's memmove.
from collections import deque


cdef object _detached(object error):
    """``error`` without its traceback and chain: they hold the decode's views of the bytes,
    which would pin ``_buffer`` (no resize while a view exists) for as long as it waits."""
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    return error


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
    # Frames decoded by ``feed``, not yet returned, with their wire bytes; then the error of the
    # frame after them, raised once they are all returned (the bytes from that frame on stay
    # in ``_buffer``, never decoded, as the reference keeps them).
    cdef object _ready
    cdef Py_ssize_t _ready_bytes
    cdef object _pending_error

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
        self._ready = deque()
        self._ready_bytes = 0
        self._pending_error = None

    @property
    def max_frame_size(self):
        return self._max_frame_size

    @property
    def buffered(self):
        """Number of received bytes not yet returned as frames."""
        cdef Py_ssize_t assembling = 0
        if self._entry is not None:
            assembling = PyBytes_GET_SIZE(self._head) + self._filled
        return (assembling + PyByteArray_GET_SIZE(self._buffer) - self._offset
                + self._ready_bytes)

    def feed(self, data):
        """Append received bytes (RemoteProtocolError once the decoder has failed); the frames
        they complete are decoded now, from ``data`` itself."""
        cdef const uint8_t[::1] view
        cdef Py_ssize_t size, position = 0
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        if self._pending_error is not None:
            return  # nothing after a malformed frame is ever decoded
        try:
            view = data
        except (TypeError, ValueError):  # a buffer of another item format: its bytes
            data = bytes(memoryview(data).cast("B"))
            view = data
        size = view.shape[0]
        while position < size and self._pending_error is None:
            if self._entry is not None:
                if self._filled < PyBytes_GET_SIZE(self._entry):
                    position += self._fill_entry(&view[position], size - position)
                else:
                    self._take_assembled()
            elif PyByteArray_GET_SIZE(self._buffer) > self._offset:
                position += self._complete_buffered(&view[position], size - position)
            else:
                position += self._decode_in_place(data, view, position)
        if position < size:  # behind a malformed frame: kept, never decoded (``buffered``)
            self._buffer += (<const char *>&view[position])[:size - position]

    cdef Py_ssize_t _fill_entry(self, const uint8_t *data, Py_ssize_t size):
        cdef Py_ssize_t take = min(size, PyBytes_GET_SIZE(self._entry) - self._filled)
        memcpy(PyBytes_AS_STRING(self._entry) + self._filled, data, take)
        self._filled += take
        return take

    cdef Py_ssize_t _complete_buffered(self, const uint8_t *data, Py_ssize_t size):
        """Copy into the buffer what its cut frame still lacks (or all of ``data`` if that is
        less); decode the frame once whole. How many bytes of ``data`` were taken."""
        cdef Py_ssize_t available = PyByteArray_GET_SIZE(self._buffer) - self._offset
        cdef Py_ssize_t take
        cdef uint32_t total_size
        cdef const uint8_t *base
        if available < 4:
            take = min(size, 4 - available)
        else:
            base = <const uint8_t *>PyByteArray_AS_STRING(self._buffer) + self._offset
            total_size = _be32(base)
            take = min(size, 4 + <Py_ssize_t>total_size - available)
        self._compact()
        self._buffer += (<const char *>data)[:take]
        available += take
        base = <const uint8_t *>PyByteArray_AS_STRING(self._buffer)
        if available < 4:
            return take
        total_size = _be32(base)
        if total_size > self._limit or total_size < 4:
            self._pending_error = self._size_error(total_size)
            return take
        if available >= 4 + <Py_ssize_t>total_size:
            frame = self._decode(base, total_size, self._buffer, 0)
            if frame is not None:
                self._emit(frame, total_size)
            del self._buffer[:]
        elif total_size >= self._assemble_over and self._start_assembly(base, available,
                                                                        total_size):
            del self._buffer[:]
        return take

    cdef Py_ssize_t _decode_in_place(self, object data, const uint8_t[::1] view,
                                     Py_ssize_t position):
        """Decode the whole frames of ``view`` from ``position`` on; keep the cut one (in the
        buffer, or in its entry). Takes every byte."""
        cdef Py_ssize_t size = view.shape[0], available, first = position
        cdef const uint8_t *base = &view[0]
        cdef uint32_t total_size
        while True:
            available = size - position
            if available < 4:
                break
            total_size = _be32(base + position)
            if total_size > self._limit or total_size < 4:
                self._pending_error = self._size_error(total_size)
                return position - first
            if available < 4 + <Py_ssize_t>total_size:
                if total_size >= self._assemble_over and self._start_assembly(
                        base + position, available, total_size):
                    return size - first
                break
            frame = self._decode(base + position, total_size, data, position)
            position += 4 + total_size
            if frame is None:
                return position - first
            self._emit(frame, total_size)
        if available:
            self._compact()
            self._buffer += (<const char *>(base + position))[:available]
        return size - first

    cdef object _decode(self, const uint8_t *frame, uint32_t total_size, object owner,
                        Py_ssize_t offset):
        """The Frame at ``frame`` (totalSize first), which is ``owner[offset:]``; None after
        recording its error for later."""
        cdef const uint8_t *start = frame + 4
        cdef const uint8_t *end = start + total_size
        decoded = _send_frame(start, end)
        if decoded is not None:
            return decoded
        decoded = _message_frame(start, end)
        if decoded is not None:
            return decoded
        try:
            return _decode_frame(owner, offset + 4, offset + 4 + total_size)
        except RemoteProtocolError as exc:
            self._pending_error = _detached(exc)
            return None

    cdef _emit(self, object frame, uint32_t total_size):
        self._ready.append((frame, 4 + <Py_ssize_t>total_size))
        self._ready_bytes += 4 + total_size

    cdef _take_assembled(self):
        """The entry being assembled is whole: its frame goes behind the decoded ones."""
        cdef Py_ssize_t size = PyBytes_GET_SIZE(self._head) + PyBytes_GET_SIZE(self._entry)
        try:
            frame = self._assembled()
        except RemoteProtocolError as exc:
            self._pending_error = _detached(exc)
            return
        self._ready.append((frame, size))
        self._ready_bytes += size

    cdef object _size_error(self, uint32_t total_size):
        return RemoteProtocolError(f"frame size {total_size} outside [4, {self._max_frame_size}]")

    def entry_window(self):
        """A writable view of the bytes still missing from the large SEND being assembled, so
        the socket reads them straight into the entry (``broker.connection.core``); None when
        no such SEND is waiting for bytes. Valid until the next call on this decoder."""
        if self._error is not None or self._pending_error is not None or self._entry is None:
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
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        if self._ready:
            frame, size = self._ready.popleft()
            self._ready_bytes -= size
            return frame
        if self._pending_error is not None:
            self._error, self._pending_error = self._pending_error, None
            raise self._error
        if self._entry is not None and self._filled >= PyBytes_GET_SIZE(self._entry):
            try:
                return self._assembled()
            except RemoteProtocolError as exc:
                self._error = exc
                raise
        raise StopIteration

    cdef bint _start_assembly(self, const uint8_t *frame, Py_ssize_t available,
                              uint32_t total_size):
        """Move a large SEND's received part into its entry's own bytes, once its head has
        arrived; False (nothing taken) if the head is not all there or it is no plain SEND."""
        cdef SendFields fields = SendFields.__new__(SendFields)
        cdef bint has_checksum = False
        cdef uint32_t expected = 0
        cdef const uint8_t *start = frame + 4
        cdef const uint8_t *entry_start
        cdef Py_ssize_t head_size, head_and_more
        if available < 8:
            return False
        # The command, a checksum and a metadata size: all there, and inside the frame, so
        # ``_send_head`` reads the same bytes as it would in the whole frame.
        head_and_more = 8 + <Py_ssize_t>_be32(start) + 10
        if head_and_more > available or head_and_more > 4 + <Py_ssize_t>total_size:
            return False
        entry_start = _send_head(start, frame + available, fields, &has_checksum, &expected)
        if entry_start == NULL:
            return False
        head_size = entry_start - frame
        self._head = PyBytes_FromStringAndSize(<const char *>frame, head_size)
        self._entry = PyBytes_FromStringAndSize(NULL, 4 + <Py_ssize_t>total_size - head_size)
        self._filled = available - head_size
        memcpy(PyBytes_AS_STRING(self._entry), entry_start, self._filled)
        return True

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
        return _decode_frame(whole, 4, PyByteArray_GET_SIZE(whole))

    cdef _compact(self):
        if self._offset:
            del self._buffer[: self._offset]
            self._offset = 0
