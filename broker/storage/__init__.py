"""Durable storage for Magnetar: a segmented, file-backed ledger per topic, with cursors.

Synchronous by design (the broker runs ``flush`` in a worker thread); imports neither asyncio
nor ``protocol``. Entries are opaque bytes. Public surface: see docs/CONTRACTS.md.
"""

from broker.storage.cache import EntryCache
from broker.storage.config import LedgerConfig
from broker.storage.cursor import Cursor
from broker.storage.cursor_registry import cursor_file, quarantine_cursor_file
from broker.storage.errors import (
    CorruptCursorError,
    CorruptLedgerError,
    InvalidPositionError,
    LedgerClosedError,
    LedgerFlushError,
    StorageError,
)
from broker.storage.files import FileLayer, OsFileLayer
from broker.storage.ledger import Ledger
from broker.storage.position import Position
from broker.storage.recovery import ScanResult, scan_valid_prefix

__all__ = [
    "CorruptCursorError",
    "CorruptLedgerError",
    "Cursor",
    "EntryCache",
    "FileLayer",
    "InvalidPositionError",
    "Ledger",
    "LedgerClosedError",
    "LedgerConfig",
    "LedgerFlushError",
    "OsFileLayer",
    "Position",
    "ScanResult",
    "StorageError",
    "cursor_file",
    "quarantine_cursor_file",
    "scan_valid_prefix",
]
