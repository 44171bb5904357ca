"""``CursorRegistry``: a ledger's durable cursors, their files, and reader cursors.

Durable cursor files live in ``<topic dir>/cursors/``, one per cursor, named after the cursor
by ``cursor_names`` (injective and case-safe; a folder an earlier build wrote is upgraded first),
with the real name stored inside and checked on load. On load, a cursor that remembers more than
recovery found (mark-delete past the last durable entry: only possible with ``sync_data=False``
after a power loss, or after external damage) is clamped; acks of positions past the end are
dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from uuid import uuid4

from broker.storage.config import LedgerConfig
from broker.storage.cursor import Cursor, LedgerView
from broker.storage.cursor_file import CursorState, decode_cursor_state
from broker.storage.cursor_names import (
    CURSOR_DIR,
    CURSOR_SUFFIX,
    cursor_file,
    cursor_file_stem,
    cursor_files,
    upgrade_cursor_names,
)
from broker.storage.cursor_store import CursorStore
from broker.storage.errors import CorruptCursorError
from broker.storage.files import FileLayer, read_file, unlink_durably
from broker.storage.position import Position

__all__ = [
    "CURSOR_DIR",
    "CURSOR_SUFFIX",
    "CursorRegistry",
    "cursor_file",
    "cursor_file_stem",
    "quarantine_cursor_file",
]


def quarantine_cursor_file(ledger_directory: Path, name: str, layer: FileLayer) -> Path | None:
    """Move a damaged cursor file aside (``.corrupt`` suffix, kept for inspection), durably.

    For state that can be rebuilt (the PIP-6 snapshot): the ledger then opens without it.
    Returns the new path, or None if there was no such file.
    """
    path = cursor_file(ledger_directory, name)
    if not path.exists():
        return None
    target = path.with_name(path.name + ".corrupt")
    layer.replace(path, target)
    layer.fsync_dir(path.parent)
    return target


class CursorRegistry:
    """Creates, loads, lists and deletes a ledger's cursors.

    ``ledger_directory`` is the ledger's folder; the cursors folder under it is a ``Path`` made
    when used (one kept per loaded topic cost ~300 B, issue #26)."""

    __slots__ = (
        "_config",
        "_cursors",
        "_layer",
        "_ledger",
        "_ledger_directory",
        "_store",
        "durable",
    )

    def __init__(
        self, ledger: LedgerView, ledger_directory: Path, layer: FileLayer, config: LedgerConfig
    ) -> None:
        self._ledger = ledger
        self._ledger_directory = ledger_directory
        self._layer = layer
        self._config = config
        self._cursors: dict[str, Cursor] = {}
        #: The durable cursors by name: a read-only live view, made once (a copy per call cost
        #: a dict per housekeeping visit). Iterate a copy (``list(...)``) off the event loop,
        #: where cursors are added and removed.
        self.durable: Mapping[str, Cursor] = MappingProxyType(self._cursors)
        self._store = CursorStore(
            layer,
            ledger_directory,
            config.max_unacked_ranges_to_persist,
            config.max_batch_deleted_index_to_persist,
        )

    @property
    def directory(self) -> Path:
        """The cursors folder."""
        return self._ledger_directory / CURSOR_DIR

    def get(self, name: str) -> Cursor | None:
        return self._cursors.get(name)

    def persisted_marks(self) -> list[Position]:
        """Every durable cursor's persisted mark-delete (what trimming may rely on)."""
        # A copy first: a disk thread (trim) may ask while the loop adds or removes a cursor.
        return [c.persisted_mark_delete_position for c in list(self._cursors.values())]

    def path_of(self, name: str) -> Path:
        return cursor_file(self._ledger_directory, name)

    def create(self, name: str, mark_delete: Position) -> Cursor:
        """A new durable cursor, persisted before it is returned."""
        cursor = self.new(name, mark_delete)
        cursor.persist_unshared()  # not registered yet: no other thread can reach it
        return self.register(cursor)

    def new(self, name: str, mark_delete: Position) -> Cursor:
        """A new durable cursor in memory only: `Cursor.persist` it, then `register` it."""
        if not name:
            raise ValueError("cursor name must not be empty")
        return self._make(CursorState(name=name, mark_delete=mark_delete))

    def register(self, cursor: Cursor) -> Cursor:
        """Make a persisted new cursor one of the ledger's (the existing one if the name is
        already taken)."""
        return self._cursors.setdefault(cursor.name, cursor)

    def delete(self, name: str) -> None:
        self.detach(name)
        self.remove_file(name)

    def detach(self, name: str) -> None:
        """Stop tracking cursor ``name`` (no I/O); `remove_file` then deletes its file."""
        cursor = self._cursors.pop(name, None)
        if cursor is not None:
            cursor._mark_closed()

    def remove_file(self, name: str) -> None:
        """Delete the file of a detached cursor, durably (a disk operation)."""
        self._store.forget(name)
        unlink_durably(self._layer, self.path_of(name))

    def non_durable(self, start: Position) -> Cursor:
        state = CursorState(name=f"reader-{uuid4().hex[:12]}", mark_delete=start.previous())
        return Cursor(
            state.name,
            self._ledger,
            state,
            store=None,
            persist_interval_s=self._config.persist_interval_s,
        )

    def load_all(self, last: Position) -> None:
        """Load every cursor file; ``last`` is the last durable position after recovery."""
        directory = self.directory
        upgrade_cursor_names(directory, self._layer)
        for path in cursor_files(directory):
            state = decode_cursor_state(read_file(path), path)
            if self.path_of(state.name) != path:
                raise CorruptCursorError(path, 0, f"file holds cursor {state.name!r}")
            cursor = self._make(state)
            if cursor.mark_delete_position > last:
                cursor._clamp(last)
            else:
                cursor._drop_beyond(last)
            if cursor.dirty:
                cursor.persist_unshared()  # registered just below
            self._cursors[state.name] = cursor

    def close_all(self) -> OSError | None:
        """Close (and so persist) every durable cursor; returns the first error, if any."""
        failure: OSError | None = None
        for cursor in list(self._cursors.values()):
            try:
                cursor.close()
            except OSError as exc:
                failure = failure or exc
        return failure

    def abandon_all(self) -> None:
        """Make every cursor unusable without persisting."""
        for cursor in self._cursors.values():
            cursor._mark_closed()
        self._cursors.clear()

    def _make(self, state: CursorState) -> Cursor:
        return Cursor(
            state.name,
            self._ledger,
            state,
            store=self._store,
            persist_interval_s=self._config.persist_interval_s,
        )
