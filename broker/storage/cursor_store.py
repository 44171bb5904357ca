"""``CursorStore``: how the durable cursors of one ledger reach the disk (the cursor log).

A save appends one record to the cursor's log (``broker.storage.cursor_file``, format 2) and
``fdatasync``s it, when the record fits in the zeros the file was pre-filled with: no rename, no
directory sync, no size change, so no journal commit that the topic's own group commits would
wait behind (issue #26: the PIP-6 snapshot, persisted every second, was part of P4's p99). When it
does not fit, the save *rolls*: a new log holding only this record is written atomically
(``files.atomic_write``) over the old file.

How much a roll pre-fills (``capacity_for``): a cursor's first file is written exactly (a topic
created and never used again keeps a ~200-byte file, not a pre-filled one: 100,000 idle topics);
from its second save on, room for ``SLOTS_PER_LOG`` records of its size, at most
``MAX_LOG_BYTES``; a cursor whose record alone is over ``MAX_PADDED_RECORD`` (the idempotency
window's snapshot of many keys) rolls on every save, as every cursor did before.

The store remembers, per path it rolled with room to spare, the next record's offset, the file's
capacity and its inode; a file that disappeared or was replaced meanwhile (deleted, quarantined)
is rolled, never appended to. A failed append forgets the tail, so the next save rolls: the
bytes after the last good record are then unknown.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from broker.storage.cursor_file import (
    CursorState,
    encode_cursor_document,
    log_header,
    log_record,
    next_record_offset,
)
from broker.storage.cursor_names import cursor_file
from broker.storage.files import FileLayer, atomic_write, write_all

log = logging.getLogger(__name__)

SLOTS_PER_LOG = 64
MAX_LOG_BYTES = 256 * 1024
MAX_PADDED_RECORD = 16 * 1024
_PAGE = 4096


class _Tail(NamedTuple):
    offset: int  # where the next record goes
    capacity: int  # the file's size
    inode: int


def capacity_for(record_bytes: int) -> int:
    """The size of a pre-filled log whose records take ``record_bytes`` (see module docstring)."""
    slot = next_record_offset(record_bytes)
    wanted = min(slot * SLOTS_PER_LOG, MAX_LOG_BYTES)
    return -(-max(wanted, 2 * slot + _PAGE) // _PAGE) * _PAGE


class CursorStore:
    """Where and how the durable cursors of one ledger persist (file layer, bounds); one per
    ledger, shared by its cursors (a store per cursor cost ~70 B per cursor, issue #26).

    A file's path is made when it is written, from the ledger's folder and the cursor's name.
    Saves of one cursor never overlap (``Cursor.persist`` holds its lock); of different cursors
    they may, in different threads, and touch different paths."""

    __slots__ = ("_ledger_directory", "_tails", "layer", "max_batch", "max_ranges")

    def __init__(
        self, layer: FileLayer, ledger_directory: Path, max_ranges: int, max_batch: int
    ) -> None:
        self.layer = layer
        self._ledger_directory = ledger_directory
        self.max_ranges = max_ranges
        self.max_batch = max_batch
        self._tails: dict[Path, _Tail] | None = None  # made on the first pre-filled roll

    def path_of(self, name: str) -> Path:
        return cursor_file(self._ledger_directory, name)

    def save(self, state: CursorState) -> None:
        if len(state.ranges) > self.max_ranges or len(state.batch) > self.max_batch:
            log.warning(
                "cursor %r: persisting only %d of %d ack ranges and %d of %d batch ack sets; "
                "the rest will be redelivered after a restart",
                state.name,
                min(len(state.ranges), self.max_ranges),
                len(state.ranges),
                min(len(state.batch), self.max_batch),
                len(state.batch),
            )
        record = log_record(encode_cursor_document(state, self.max_ranges, self.max_batch))
        path = self.path_of(state.name)
        if not self._append(path, record):
            self._roll(path, record)

    def forget(self, name: str) -> None:
        """The cursor's file is being deleted: drop what the store remembers of it."""
        if self._tails is not None:
            self._tails.pop(self.path_of(name), None)

    def _append(self, path: Path, record: bytes) -> bool:
        """Append ``record`` to the log at ``path`` if it fits; False if the save must roll."""
        tails = self._tails
        tail = None if tails is None else tails.get(path)
        if tail is None or tail.offset + len(record) > tail.capacity:
            return False
        assert tails is not None
        layer = self.layer
        try:
            fd = layer.open(path, os.O_WRONLY)
        except FileNotFoundError:
            del tails[path]
            return False
        try:
            if os.fstat(fd).st_ino != tail.inode:  # replaced behind the store's back
                del tails[path]
                return False
            write_all(layer, fd, record, tail.offset)
            layer.fdatasync(fd)
        except BaseException:
            tails.pop(path, None)  # what follows the last good record is unknown: roll next
            raise
        finally:
            layer.close(fd)
        tails[path] = tail._replace(offset=next_record_offset(tail.offset + len(record)))
        return True

    def _roll(self, path: Path, record: bytes) -> None:
        """Replace the file with a new log holding ``record``, pre-filled unless it is the
        cursor's first file or the record is large (see the module docstring)."""
        header = log_header()
        used = len(header) + len(record)
        padded = len(record) <= MAX_PADDED_RECORD and path.exists()
        if self._tails is not None:
            self._tails.pop(path, None)
        if not padded:
            atomic_write(self.layer, path, header + record)
            return
        capacity = capacity_for(len(record))
        atomic_write(self.layer, path, header + record + bytes(capacity - used))
        if self._tails is None:
            self._tails = {}
        self._tails[path] = _Tail(next_record_offset(used), capacity, os.stat(path).st_ino)
