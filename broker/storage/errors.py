"""Exceptions raised by the storage layer.

``CorruptLedgerError`` is the one the broker must treat as fatal for the topic: it names the
damaged file and byte offset, and nothing is dropped silently. ``LedgerFlushError`` is an
``OSError`` (so ``except OSError`` keeps working) that also says which appended positions were
discarded by the failed flush.
"""

from __future__ import annotations

from pathlib import Path

from broker.storage.position import Position


class StorageError(Exception):
    """Base class of storage-specific errors."""


class CorruptLedgerError(StorageError):
    """Data that was reported durable fails its checksum or structure check.

    Attributes:
        path: the damaged file.
        offset: byte offset of the first bad byte range found (record or header start).
        reason: short human explanation.
    """

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"corrupt ledger file {path} at byte offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class CorruptCursorError(CorruptLedgerError):
    """A durable cursor's state file fails its checksum or cannot be decoded."""


class LedgerClosedError(StorageError):
    """The ledger (or cursor) was closed or deleted; no further operations are possible."""


class InvalidPositionError(StorageError, ValueError):
    """A position argument is out of the range the operation accepts."""


class LedgerFlushError(StorageError, OSError):
    """A flush failed with an ``OSError`` (EIO, ENOSPC, ...); see ``Ledger.flush``.

    Attributes:
        last_confirmed: last durable position after the failure (unchanged by it), or None.
        discarded_through: every appended position up to and including this one that was not
            durable has been discarded (never readable, never reused). None if nothing was.
    """

    def __init__(
        self,
        cause: OSError,
        last_confirmed: Position | None,
        discarded_through: Position | None,
    ) -> None:
        OSError.__init__(self, cause.errno, f"ledger flush failed: {cause.strerror or cause}")
        self.last_confirmed = last_confirmed
        self.discarded_through = discarded_through
