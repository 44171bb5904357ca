# The values of a chunked binary column as bytes, in any row order (included by _speedups.pyx):
# the compiled protocol.row_gather.RowGather (PyRowGather is the reference, same results and
# errors). A table of each row's address and size is filled in one pass over the offsets; a
# slice of the order then costs one PyBytes per row, the copy to_pylist makes anyway, without
# the sorted Arrow copy (take) the sink used to convert.

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t

# Rows ahead whose table slot and first data byte are prefetched: the order is random, so each
# row's slot and value are a cache miss; fetching them this far ahead overlaps the misses.
cdef enum:
    _GATHER_AHEAD = 24


# A row's value: its first byte (NULL: a null row) and its length, side by side (the order is
# random: one cache line per row, not one per array).
cdef struct _GatherRow:
    const uint8_t *address
    Py_ssize_t size


cdef inline void _gather_prefetch(const uint8_t *address, Py_ssize_t size) noexcept nogil:
    """Prefetch the cache lines a value spans, its first four at most (a longer copy is
    sequential: the hardware prefetcher follows it). A value of 100 bytes spans three lines
    more often than two: prefetching its first two left the third a miss for most rows."""
    cdef uintptr_t line = (<uintptr_t>address) & ~(<uintptr_t>63)
    cdef uintptr_t end = (<uintptr_t>address) + <uintptr_t>size
    cdef int count = 0
    while line < end and count < 4:
        magnetar_prefetch(<const uint8_t *>line)
        line += 64
        count += 1


cdef class RowGather:
    """See protocol.row_gather.PyRowGather."""

    cdef _GatherRow *_table
    cdef Py_buffer *_views  # the data buffers, held until the gather is freed
    cdef Py_ssize_t _view_count
    cdef list _owners
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t nulls
    cdef readonly Py_ssize_t min_size
    cdef readonly Py_ssize_t max_size

    def __cinit__(self, chunks):
        cdef Py_ssize_t total = 0, row = 0, at = 0, first, count
        chunks = list(chunks)
        for chunk in chunks:
            if len(chunk) != 6:
                raise ValueError("a chunk is (validity, offsets, data, first, count, wide)")
            if chunk[3] < 0 or chunk[4] < 0:
                raise ValueError("first and count must be >= 0")
            total += <Py_ssize_t>chunk[4]
        self._owners = chunks
        self.count = total
        self.min_size = self.max_size = -1
        self._views = <Py_buffer *>malloc((len(chunks) or 1) * sizeof(Py_buffer))
        self._table = <_GatherRow *>malloc((total or 1) * sizeof(_GatherRow))
        if self._views == NULL or self._table == NULL:
            raise MemoryError()
        for validity, offsets, data, first, count, wide in chunks:
            PyObject_GetBuffer(data, &self._views[self._view_count], PyBUF_SIMPLE)
            self._view_count += 1
            self._fill(validity, offsets, &self._views[self._view_count - 1], first, count,
                       wide, row)
            row += count

    cdef void _fill(self, validity, offsets, Py_buffer *data, Py_ssize_t first,
                    Py_ssize_t count, bint wide, Py_ssize_t row) except *:
        """Rows ``row .. row + count`` of the table: chunk values ``first ..``."""
        cdef Py_buffer bounds_view, bits_view
        cdef const uint8_t *bounds
        cdef const uint8_t *bits = NULL
        cdef const uint8_t *base = <const uint8_t *>data.buf
        cdef Py_ssize_t i, start = 0, stop, width = 8 if wide else 4, bit
        cdef int64_t bound64
        cdef int32_t bound32
        PyObject_GetBuffer(offsets, &bounds_view, PyBUF_SIMPLE)
        bits_view.buf = NULL
        try:
            if (first + count + 1) * width > bounds_view.len:
                raise ValueError("the offsets buffer is too short")
            if validity is not None:
                PyObject_GetBuffer(validity, &bits_view, PyBUF_SIMPLE)
                if (first + count + 7) // 8 > bits_view.len:
                    raise ValueError("the validity buffer is too short")
                bits = <const uint8_t *>bits_view.buf
            bounds = <const uint8_t *>bounds_view.buf
            for i in range(count + 1):
                if wide:
                    memcpy(&bound64, bounds + (first + i) * 8, 8)
                    stop = <Py_ssize_t>bound64
                else:
                    memcpy(&bound32, bounds + (first + i) * 4, 4)
                    stop = <Py_ssize_t>bound32
                if i > 0:
                    if stop < start or start < 0 or stop > data.len:
                        raise ValueError("an offset outside the data buffer")
                    bit = first + i - 1
                    if bits != NULL and not (bits[bit >> 3] >> (bit & 7)) & 1:
                        self._table[row].address = NULL
                        self._table[row].size = 0
                        self.nulls += 1
                    else:
                        self._table[row].address = base + start
                        self._table[row].size = stop - start
                        if self.min_size < 0 or stop - start < self.min_size:
                            self.min_size = stop - start
                        if stop - start > self.max_size:
                            self.max_size = stop - start
                    row += 1
                start = stop
        finally:
            PyBuffer_Release(&bounds_view)
            if bits_view.buf != NULL:
                PyBuffer_Release(&bits_view)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._views != NULL:
            for i in range(self._view_count):
                PyBuffer_Release(&self._views[i])
        free(self._views)
        free(self._table)

    cdef int64_t *_rows(self, Py_buffer *view, Py_ssize_t start, Py_ssize_t stop) except NULL:
        """The row numbers ``start .. stop`` of the order in ``view``, checked, copied into a
        block the caller frees (aligned, whatever the order's buffer is)."""
        cdef int64_t *rows
        cdef Py_ssize_t i
        if start < 0 or stop < start or stop * 8 > view.len:
            raise ValueError("start and stop must be within the order")
        rows = <int64_t *>malloc(((stop - start) or 1) * 8)
        if rows == NULL:
            raise MemoryError()
        memcpy(rows, (<const uint8_t *>view.buf) + start * 8, (stop - start) * 8)
        for i in range(stop - start):
            if rows[i] < 0 or rows[i] >= self.count:
                free(rows)
                raise ValueError("a row number out of range")
        return rows

    def values(self, order, Py_ssize_t start, Py_ssize_t stop):
        """See protocol.row_gather.PyRowGather.values."""
        cdef Py_buffer view
        cdef int64_t *rows = NULL
        cdef Py_ssize_t i, n, ahead
        cdef _GatherRow row
        cdef object value
        PyObject_GetBuffer(order, &view, PyBUF_SIMPLE)
        try:
            rows = self._rows(&view, start, stop)
            n = stop - start
            result = PyList_New(n)
            for i in range(n):
                ahead = i + _GATHER_AHEAD
                if ahead < n:  # the value's lines, and the table slot further ahead
                    row = self._table[rows[ahead]]
                    _gather_prefetch(row.address, row.size)
                    if ahead + _GATHER_AHEAD < n:
                        magnetar_prefetch(&self._table[rows[ahead + _GATHER_AHEAD]])
                row = self._table[rows[i]]
                if row.address == NULL:
                    value = None
                else:
                    value = PyBytes_FromStringAndSize(<const char *>row.address, row.size)
                Py_INCREF(value)  # PyList_SET_ITEM steals a reference
                PyList_SET_ITEM(result, i, value)
        finally:
            PyBuffer_Release(&view)
            free(rows)
        return result

    def sizes(self, order, Py_ssize_t start, Py_ssize_t stop):
        """See protocol.row_gather.PyRowGather.sizes."""
        cdef Py_buffer view
        cdef int64_t *rows = NULL
        cdef Py_ssize_t i, n
        cdef int64_t *out
        PyObject_GetBuffer(order, &view, PyBUF_SIMPLE)
        try:
            rows = self._rows(&view, start, stop)
            n = stop - start
            result = PyBytes_FromStringAndSize(NULL, n * 8)
            out = <int64_t *>PyBytes_AS_STRING(result)
            for i in range(n):
                out[i] = self._table[rows[i]].size
        finally:
            PyBuffer_Release(&view)
            free(rows)
        return result
