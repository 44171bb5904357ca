"""``MetadataStore``: owns ``ledger.meta`` (sealed list, properties, trim horizon) at runtime.

Every rewrite builds the whole document from the current state plus the requested change and
replaces the file atomically (``files.atomic_write``). Writers hold ``lock`` across "write the
file, then apply the change in memory", so concurrent rewrites (a seal from the flush thread, a
property change or a trim from the event loop) never lose each other's updates, and memory never
runs ahead of the disk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from broker.storage.files import FileLayer, atomic_write, read_file
from broker.storage.metadata import (
    METADATA_FILE_NAME,
    LedgerMetadata,
    SealedLedger,
    decode_metadata,
    encode_metadata,
)
from broker.storage.position import Position


class MetadataStore:
    """The in-memory mirror of ``ledger.meta`` and the only writer of the file."""

    def __init__(
        self, layer: FileLayer, directory: Path, sealed_infos: Callable[[], list[SealedLedger]]
    ) -> None:
        self.path = directory / METADATA_FILE_NAME
        self.lock = threading.Lock()
        self.properties: dict[str, int] = {}
        self.last_trimmed: Position | None = None
        self._layer = layer
        self._sealed_infos = sealed_infos

    def load(self) -> LedgerMetadata:
        """Read the file (an empty ledger if absent); raises ``CorruptLedgerError`` if damaged."""
        try:
            data = read_file(self.path)
        except FileNotFoundError:
            meta = LedgerMetadata()
        else:
            meta = decode_metadata(data, self.path)
        self.properties = dict(meta.properties)
        self.last_trimmed = meta.last_trimmed
        return meta

    def write(
        self,
        *,
        sealed: list[SealedLedger] | None = None,
        properties: dict[str, int] | None = None,
        last_trimmed: Position | None = None,
    ) -> None:
        """Rewrite the file from the current state with the given replacements (hold ``lock``;
        apply the change in memory only after this returns)."""
        meta = LedgerMetadata(
            ledgers=tuple(sealed if sealed is not None else self._sealed_infos()),
            properties=properties if properties is not None else dict(self.properties),
            last_trimmed=last_trimmed if last_trimmed is not None else self.last_trimmed,
        )
        atomic_write(self._layer, self.path, encode_metadata(meta))
