"""``MetadataStore``: owns ``ledger.meta`` (sealed list, properties, trim horizon) at runtime.

In cluster mode the file is ``ledger.meta.<owner epoch>`` and the highest epoch's is current
(``metadata.metadata_file_name``); ``adopt`` makes a new owner's file current at recovery.

Every rewrite builds the whole document from the current state plus the requested change and
replaces the file atomically (``files.atomic_write``). Writers hold ``lock`` across "write the
file, then apply the change in memory", so concurrent rewrites (a seal from the flush thread, a
property change or a trim from the event loop) never lose each other's updates, and memory never
runs ahead of the disk. The lock is made on first use (``lock.first_lock``): most loaded topics
never rewrite the file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from broker.storage.files import FileLayer, atomic_write, read_file, unlink_durably
from broker.storage.ledger_meta_file import (
    LedgerMetadata,
    SealedLedger,
    current_metadata_path,
    decode_metadata,
    encode_metadata,
    metadata_file_name,
    metadata_files,
)
from broker.storage.lock import first_lock
from broker.storage.position import Position


class MetadataStore:
    """The in-memory mirror of the ledger's metadata file and the only writer of it.

    ``epoch`` (cluster mode) names the file this owner writes; see ``metadata_file_name``.
    """

    __slots__ = (
        "_epoch",
        "_layer",
        "_loaded",
        "_lock",
        "_sealed_infos",
        "directory",
        "last_trimmed",
        "properties",
    )

    def __init__(
        self,
        layer: FileLayer,
        directory: Path,
        sealed_infos: Callable[[], list[SealedLedger]],
        epoch: int | None = None,
    ) -> None:
        self.directory = directory
        self._epoch = epoch
        self._lock: threading.Lock | None = None
        self.properties: dict[str, int] = {}
        self.last_trimmed: Position | None = None
        self._layer = layer
        self._sealed_infos = sealed_infos
        self._loaded: LedgerMetadata | None = None

    @property
    def lock(self) -> threading.Lock:
        """Held across "write the file, then apply the change in memory" (module docstring)."""
        return self._lock or first_lock(self, "_lock")

    @property
    def path(self) -> Path:
        """The file this owner writes; derived when used (a ``Path`` kept per loaded topic
        costs ~220 B, and an idle topic never writes it; issue #26)."""
        return self.directory / metadata_file_name(self._epoch)

    def load(self) -> LedgerMetadata:
        """Read the current file (an empty ledger if none); ``CorruptLedgerError`` if damaged."""
        path = current_metadata_path(self.directory)
        try:
            data = read_file(path)
        except FileNotFoundError:
            meta = LedgerMetadata()
        else:
            meta = decode_metadata(data, path)
        # Not a copy: the document is ours (decoded just now) and is let go by ``adopt``, and a
        # change replaces the dict rather than writing into it.
        self.properties = meta.properties
        self.last_trimmed = meta.last_trimmed
        self._loaded = meta
        return meta

    def adopt(self) -> None:
        """Make this store's own file the current one, right after ``load`` (recovery).

        When another file is current (a former owner's epoch, or the plain file of a directory
        now opened in cluster mode, or epoch files now opened standalone), its content is
        written under our name first, then the other files are removed: from then on every
        load reads what this store writes, whatever a former owner does to its own file. A
        crash in between leaves our file (same content) current. Nothing to do in the usual
        case: only our own file, or none.
        """
        loaded, self._loaded = self._loaded, None  # needed only here (~200 B per topic)
        assert loaded is not None, "adopt() before load()"
        others = [path for _rank, path in metadata_files(self.directory) if path != self.path]
        if not others:
            return
        if current_metadata_path(self.directory) != self.path:
            atomic_write(self._layer, self.path, encode_metadata(loaded))
        for path in others:
            unlink_durably(self._layer, path)

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
