"""``LedgerLock``: an advisory lock that keeps a running broker and ``repair-topic`` apart.

The broker holds a ledger directory's lock for as long as the topic is loaded; the repair tool
holds it while it reads and rewrites the directory. Neither waits for the other: the broker
answers "being repaired, retry" and the tool refuses to touch a topic a broker has open, whose
files are then in use (an active segment being written, metadata rewritten by the next seal).

It is an ``flock`` on ``<ledger dir>/ledger.lock``, so the kernel releases it when its holder
dies, even by SIGKILL: a crashed broker never leaves a stale lock behind. The file itself holds
nothing and needs no fsync; ``Ledger.delete`` removes it with the rest of the directory.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = "ledger.lock"


class LedgerLock:
    """A held lock on one ledger directory; ``release`` (idempotent) gives it up."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def try_acquire(cls, directory: Path) -> LedgerLock | None:
        """The lock on ``directory`` (which must exist), or None if someone else holds it.

        Raises:
            OSError: the lock file cannot be created or locked for another reason.
        """
        path = directory / LOCK_FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the flock
