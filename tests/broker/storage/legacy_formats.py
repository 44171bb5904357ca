"""What earlier builds wrote, for the upgrade tests (issue #22: a new build opens every data
directory an earlier one wrote).

Cursor files before the cursor log (issue #26) were checked files (``files.encode_checked``,
magic ``MGCR``) holding the same JSON document the log's records hold."""

from __future__ import annotations

from broker.storage.cursor_file import CURSOR_MAGIC, CursorState, encode_cursor_document
from broker.storage.files import encode_checked


def checked_cursor_file(state: CursorState, max_ranges: int = 1000, max_batch: int = 1000) -> bytes:
    """The bytes of a cursor file as the builds before the cursor log wrote it."""
    return encode_checked(CURSOR_MAGIC, encode_cursor_document(state, max_ranges, max_batch))
