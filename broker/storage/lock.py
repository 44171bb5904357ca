"""``LedgerLock``: an advisory lock that keeps a running broker and ``repair-topic`` apart.

The broker holds a ledger directory's lock for as long as the topic is loaded; the repair tool
holds it while it reads and rewrites the directory. Neither waits for the other: the broker
answers "being repaired, retry" and the tool refuses to touch a topic a broker has open, whose
files are then in use (an active segment being written, metadata rewritten by the next seal).

A lock needs an open descriptor for as long as it is held, and a broker with 100,000 loaded
topics cannot hold 100,000 descriptors (``ulimit -n``). So the lock of a topic is a one-byte
open-file-description lock (Linux ``F_OFD_SETLK``) in ONE file per namespace,
``<namespace dir>/@ledger.locks``, at an offset derived from the topic's folder name (a 62-bit
hash: two folders of a namespace sharing an offset would only make one wait for the other's
unload). A broker passes its ``LockTable``, so all its locks of a namespace share one
descriptor; without a table (the repair tool) a lock opens its own. Locks on different open
file descriptions conflict even inside one process, and the kernel drops them when their holder
dies, even by SIGKILL: a crashed broker never leaves a stale lock behind. The file holds
nothing and needs no fsync.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
from pathlib import Path

#: A name no topic folder can take, whatever the case (``folder_name`` writes ``@`` as
#: ``%40``): a topic may be called ``ledger.locks``, and listings skip this file as a stray.
LOCKS_FILE_NAME = "@ledger.locks"

# struct flock: l_type, l_whence, l_start, l_len, l_pid (and padding), native layout.
_FLOCK = struct.Struct("hhqqi4x")
# OFD locks conflict between descriptions of one process; classic POSIX locks (the fallback
# where the kernel has no OFD locks) do not, which only matters to in-process tests.
_SET_LOCK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)


#: Guards the creation of every lock made on first use (``first_lock``); held for that only.
_FIRST_USE = threading.Lock()


def first_lock(owner: object, slot: str) -> threading.Lock:
    """The lock in ``owner.<slot>``, made now if the slot still holds None.

    Storage objects make their locks on first use: an idle loaded topic never takes most of
    them, and 100,000 topics holding ~10 locks each cost ~90 MB (issue #26). Use it as
    ``with self._lock or first_lock(self, "_lock"):``; the slot is read again under one
    module-wide guard, so two threads asking at once get the same lock.
    """
    with _FIRST_USE:
        lock: threading.Lock | None = getattr(owner, slot)
        if lock is None:
            lock = threading.Lock()
            setattr(owner, slot, lock)
        return lock


def _offset_of(directory: Path) -> int:
    digest = hashlib.blake2b(directory.name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2  # a non-negative off_t


def _set_lock(fd: int, offset: int, kind: int) -> None:
    fcntl.fcntl(fd, _SET_LOCK, _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0))


class LockTable:
    """One shared descriptor per locks file, for a broker that holds many ledger locks."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # loads take locks from worker threads
        self._files: dict[Path, tuple[int, int]] = {}  # locks file -> (fd, locks held)
        self._paths: dict[Path, Path] = {}

    def open(self, path: Path) -> tuple[int, Path]:
        """The shared descriptor of ``path``, and the table's own ``Path`` object for it (one
        per namespace, not one per lock)."""
        with self._mutex:
            fd, held = self._files.get(path, (-1, 0))
            if fd < 0:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                self._paths[path] = path
            self._files[path] = (fd, held + 1)
            return fd, self._paths[path]

    def close(self, path: Path) -> None:
        """One holder of ``path``'s descriptor is done; the last one closes it."""
        with self._mutex:
            fd, held = self._files[path]
            if held > 1:
                self._files[path] = (fd, held - 1)
            else:
                del self._files[path]
                del self._paths[path]
                os.close(fd)

    def descriptors(self) -> int:
        with self._mutex:
            return len(self._files)


class LedgerLock:
    """A held lock on one ledger directory; ``release`` (idempotent) gives it up."""

    __slots__ = ("_fd", "_offset", "_table", "path")

    def __init__(self, path: Path, offset: int, fd: int, table: LockTable | None) -> None:
        self.path = path  # the namespace's locks file
        self._offset = offset
        self._fd: int | None = fd
        self._table = table

    @classmethod
    def try_acquire(cls, directory: Path, table: LockTable | None = None) -> LedgerLock | None:
        """The lock on ``directory`` (whose parent must exist), or None if someone else holds
        it. With ``table``, the descriptor is shared with the table's other locks.

        Raises:
            OSError: the locks file cannot be created or locked for another reason.
        """
        path = directory.parent / LOCKS_FILE_NAME
        offset = _offset_of(directory)
        if table is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        else:
            fd, path = table.open(path)
        try:
            _set_lock(fd, offset, fcntl.F_WRLCK)
        except OSError as exc:
            cls._give_back(path, fd, table)
            if exc.errno in (errno.EAGAIN, errno.EACCES):  # held elsewhere
                return None
            raise
        except BaseException:
            cls._give_back(path, fd, table)
            raise
        return cls(path, offset, fd, table)

    @staticmethod
    def _give_back(path: Path, fd: int, table: LockTable | None) -> None:
        if table is None:
            os.close(fd)
        else:
            table.close(path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                _set_lock(fd, self._offset, fcntl.F_UNLCK)
            finally:
                self._give_back(self.path, fd, self._table)
