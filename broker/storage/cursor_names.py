"""Cursor file names: which file in ``<topic dir>/cursors/`` holds which cursor, and the upgrade
of folders an earlier build named differently.

Subscription names come from clients, so the mapping must hold against any name:

* **Injective.** ``[a-z0-9._-]`` stay as they are and every other UTF-8 byte becomes ``%XX``
  (upper-case hex): the topic folders' spelling (``protocol.topic_name.folder_name``). A name
  whose spelling would be too long for one file name is stored as ``~<sha256 of the name>``;
  that spelling never escapes ``~``, so no spelled name can take a hashed name's file.
* **Case-safe.** No letter is kept upper-case outside the hex digits of an escape, so two names
  never differ only in case on disk: a case-insensitive volume (APFS, NTFS, a bind mount from
  one) keeps them apart. Non-ASCII is escaped too, so no Unicode normalization applies.

Every cursor file also holds its cursor's real name, checked on load (``CursorRegistry``).

Format 1 (the builds before this module) kept ``A-Z`` and ``~`` as they were
(``urllib.parse.quote(name, safe="")``) and hashed long names to ``h-<sha256>``, a spelling a
short name could have: two names could share one file. Format 2 is the one above; a cursor
folder is in format 2 once it holds the ``FORMAT_MARKER`` file. ``upgrade_cursor_names`` takes a
folder without it there: each file is renamed (atomically) to the name its *stored* cursor name
maps to, then the marker is written (atomically). A crash in between leaves some files renamed
and no marker; the next open renames the rest, so an upgrade loses no subscription.
"""

from __future__ import annotations

import urllib.parse
from hashlib import sha256
from pathlib import Path

from broker.storage.cursor_file import decode_cursor_state
from broker.storage.errors import CorruptCursorError
from broker.storage.files import FileLayer, atomic_write, list_files, read_file
from protocol.topic_name import folder_name

CURSOR_DIR = "cursors"
CURSOR_SUFFIX = ".cursor"
#: Present in a cursor folder whose files are named by format 2 (the content says why).
FORMAT_MARKER = "cursor-names.v2"
_MARKER_TEXT = b"cursor file names: format 2 (broker/storage/cursor_names.py)\n"
# Longest spelled stem: with ".cursor" it stays well under the 255-byte file-name limit.
_MAX_STEM = 200
# Never in a spelled stem (folder_name writes "~" as %7E), so hashed stems are a namespace apart.
_HASHED_PREFIX = "~"
_LEGACY_MAX_STEM = 180


def cursor_file_stem(name: str) -> str:
    """The file stem of cursor ``name`` (format 2, see the module docstring)."""
    try:
        spelled = folder_name(name)
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 spelling: hash its code points
        spelled = None
    if spelled is not None and len(spelled) <= _MAX_STEM:
        return spelled
    return _HASHED_PREFIX + sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def cursor_file(ledger_directory: Path, name: str) -> Path:
    """Where durable cursor ``name`` of the ledger in ``ledger_directory`` is stored."""
    return ledger_directory / CURSOR_DIR / (cursor_file_stem(name) + CURSOR_SUFFIX)


def legacy_cursor_file_stem(name: str) -> str:
    """Format 1's stem of cursor ``name``: what builds before format 2 wrote (upgrade reader)."""
    quoted = urllib.parse.quote(name, safe="")
    return quoted if len(quoted) <= _LEGACY_MAX_STEM else "h-" + sha256(name.encode()).hexdigest()


def cursor_files(folder: Path) -> list[Path]:
    """The cursor files in ``folder`` (the marker, temp and quarantined files are not)."""
    return [path for path in list_files(folder) if path.name.endswith(CURSOR_SUFFIX)]


def upgrade_cursor_names(folder: Path, layer: FileLayer) -> None:
    """Bring cursor ``folder`` to format 2 if it is not there yet (a disk operation).

    Raises:
        CorruptCursorError: a cursor file is damaged (its name cannot be read: the topic is
            refused until repaired, as for any damaged cursor file; the next open resumes), or
            a file is named by neither format for the cursor it holds, or two files claim one
            cursor.
    """
    if (folder / FORMAT_MARKER).exists():
        return
    moved = False
    for path in cursor_files(folder):
        name = decode_cursor_state(read_file(path), path).name
        stem = path.name[: -len(CURSOR_SUFFIX)]
        target = folder / (cursor_file_stem(name) + CURSOR_SUFFIX)
        if target == path:
            continue  # spelled alike in both formats, or renamed by an interrupted upgrade
        # Compared without case: a case-insensitive volume may list a file under the case of
        # an earlier cursor's file that the later one replaced (format 1 kept upper case).
        if stem.lower() != legacy_cursor_file_stem(name).lower():
            raise CorruptCursorError(path, 0, f"file holds cursor {name!r}")
        if target.exists():
            # Cannot happen with files the broker wrote; never overwrite a cursor to find out.
            raise CorruptCursorError(path, 0, f"cursor {name!r} also has the file {target.name}")
        layer.replace(path, target)
        moved = True
    if moved:
        layer.fsync_dir(folder)  # the renames are durable before the marker says they happened
    atomic_write(layer, folder / FORMAT_MARKER, _MARKER_TEXT)
