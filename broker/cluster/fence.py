"""Fencing on shared storage: the owner's epoch in ``<topic dir>/owner.fence``.

BookKeeper fences a ledger on recovery so that the previous writer can no longer add to it.
A POSIX file system offers no conditional write, so Magnetar gets the same effect from an
order of operations (docs/CLUSTER.md, "Fencing"):

1. the new owner, holding the bundle in etcd at epoch E (the ownership key's create revision),
   writes ``owner.fence`` = E atomically (temp + fsync + rename + directory fsync) *before* it
   reads the ledger, then recovers it (the previous owner's active segment is cut at its valid
   end and sealed at that end in ``ledger.meta``);
2. every owner runs ``FenceCheck`` after each group-commit write + fdatasync and before the
   entries become readable or acknowledged (the writer's ``fence`` hook), and before it rolls to
   a new segment file or rewrites ``ledger.meta``: one ``stat`` of the fence file, plus the local
   lease deadline. A changed file with another epoch, or a lease that may have expired, raises
   ``LedgerFencedError``: nothing of that group is acknowledged or served, ever.

A zombie's entry that passed the check was durable before the new owner wrote the fence, hence
before it read the ledger: the new owner recovered it (and its dedup replay knows it). An entry
that failed the check may lie in the file beyond the recorded end, where no reader looks.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from broker.storage.errors import StorageError
from broker.storage.files import (
    FileLayer,
    OsFileLayer,
    atomic_write,
    decode_checked,
    encode_checked,
    read_file,
)

log = logging.getLogger(__name__)

FENCE_FILE = "owner.fence"
_MAGIC = b"MFEN"


class LedgerFencedError(StorageError):
    """This broker's ownership of the topic ended (a newer epoch fenced it, or the lease may
    have expired): nothing more may be acknowledged or written."""


class StaleOwnershipError(StorageError):
    """The topic is already fenced by a newer epoch than the one this broker holds."""


def read_fence_epoch(directory: Path) -> int:
    """The epoch recorded in ``directory``'s fence file; 0 if there is none."""
    path = directory / FENCE_FILE
    try:
        data = read_file(path)
    except FileNotFoundError:
        return 0
    return int(json.loads(decode_checked(_MAGIC, data, path))["epoch"])


def install_fence(
    directory: Path,
    epoch: int,
    broker_id: str,
    lease_valid: Callable[[], bool],
    layer: FileLayer | None = None,
) -> FenceCheck:
    """Record ``epoch`` as the topic's owner epoch (call before opening its ledger).

    Raises:
        StaleOwnershipError: a newer epoch already fenced it (this broker lost the bundle).
    """
    found = read_fence_epoch(directory)
    if found > epoch:
        raise StaleOwnershipError(f"{directory} is fenced at epoch {found} > ours ({epoch})")
    path = directory / FENCE_FILE
    if found != epoch:
        payload = json.dumps({"epoch": epoch, "broker": broker_id}).encode()
        atomic_write(layer or OsFileLayer(), path, encode_checked(_MAGIC, payload))
    return FenceCheck(path, epoch, lease_valid)


class FenceCheck:
    """The writer's ``fence`` hook for one topic at one epoch. Sticky: once fenced, always."""

    def __init__(self, path: Path, epoch: int, lease_valid: Callable[[], bool]) -> None:
        self.path = path
        self.epoch = epoch
        self._lease_valid = lease_valid
        self._identity = _identity(path)
        self._fenced: str | None = None
        self._lock = threading.Lock()
        #: Called once (from the thread that found it) when the check first fails.
        self.on_fenced: Callable[[str], None] | None = None

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    def __call__(self) -> None:
        """Raise ``LedgerFencedError`` unless this epoch still owns the topic."""
        with self._lock:
            if self._fenced is None:
                self._fenced = self._problem()
                if self._fenced is not None:
                    log.warning("%s: fenced: %s", self.path.parent, self._fenced)
                    if self.on_fenced is not None:
                        self.on_fenced(self._fenced)
            if self._fenced is not None:
                raise LedgerFencedError(f"{self.path.parent}: {self._fenced}")

    def _problem(self) -> str | None:
        if not self._lease_valid():
            return f"the ownership lease (epoch {self.epoch}) may have expired"
        identity = _identity(self.path)
        if identity == self._identity:
            return None  # the common case: one stat, nothing changed
        try:
            found = read_fence_epoch(self.path.parent)
        except (OSError, StorageError, ValueError) as exc:
            return f"fence file unreadable: {exc}"
        if found != self.epoch:
            return f"taken over at epoch {found} (ours {self.epoch})"
        self._identity = identity  # rewritten with our own epoch (a reload of ours)
        return None


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
