"""Persistent form of a durable cursor and its (bounded) encoding.

A cursor's state is one JSON document::

    {"name": ..., "mark_delete": [l, e], "properties": {...},
     "ranges": [[l, first, last], ...], "batch": [[l, e, [word, ...]], ...]}

Bounds (Pulsar's ``managedLedgerMaxUnackedRangesToPersist`` and
``managedLedgerMaxBatchDeletedIndexToPersist``): only the lowest ``max_ranges`` individually
deleted ranges and the lowest ``max_batch`` partially acknowledged entries are written. What lies
beyond is lost on restart and those messages are delivered again: at-least-once, never loss. The
lowest ones are kept because they are the ones holding the mark-delete position back.

Two file formats hold it (the first four bytes tell them apart):

* **format 2, the cursor log** (written since issue #26): ``"MGCL" | version u16 | reserved u16``,
  then records ``length u32 | crc32c u32 | document``, the crc over the length bytes and the
  document. The first record starts right after the header, every later one at the next 512-byte
  boundary after its predecessor, so an append never rewrites a sector holding an earlier record.
  A file is pre-filled with zeros past its records (``broker.storage.cursor_store`` decides how
  far), so an append changes no file size and its ``fdatasync`` needs no journal commit. The
  state is the last record. Pulsar keeps a cursor the same way: positions appended to a cursor
  ledger, the metadata store touched only when that ledger rolls;
* **format 1, a checked file** (``files.encode_checked``, magic ``"MGCR"``) holding one document:
  what earlier builds wrote; read, never written (the first save after a load rolls it over).

Reading a log: records are taken while valid. The first slot that is not (zeros: the end; a bad
length or checksum: an append torn by a crash, whose predecessor is the state) ends the log, and
no later 512-byte boundary may hold a valid record: appends are sequential, so one there means a
record in the middle was damaged after it was written, and the newer state must not be silently
dropped (``CorruptCursorError``). The first record is written by an atomic replace, never torn, so
a bad first record is damage too.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from broker.storage.errors import CorruptCursorError
from broker.storage.files import decode_checked
from broker.storage.position import Position
from broker.storage.ranges import EntryRange

log = logging.getLogger(__name__)

CURSOR_MAGIC = b"MGCR"  # format 1: a checked file
CURSOR_LOG_MAGIC = b"MGCL"  # format 2: the cursor log
CURSOR_LOG_VERSION = 1
LOG_HEADER = struct.Struct("<4sHH")
RECORD_HEADER = struct.Struct("<II")
#: Records after the first start on this boundary (a disk sector: a torn append never rewrites
#: the sectors of the record before it).
RECORD_ALIGNMENT = 512


class RenderedProperties(Mapping[str, int]):
    """Read-only cursor properties whose bulk is JSON text: ``members``, what ``json.dumps``
    writes between the braces of a dict of ``count`` distinct names, followed by the plain
    ``rest`` (names not among them). ``encode_cursor_document`` splices the text into the
    document, so the file holds the same bytes as for the dict, without encoding it item by
    item while holding the GIL. The text may be given as a function that renders it, called
    once, by the first thread that needs it: the idempotency window's snapshot of ~100k keys
    is rendered so in the cursor write's thread, not on the event loop (issue #26 item 6).
    Reading the properties as a mapping decodes the text once, on first use (only a cursor's
    ``properties`` view or a test does)."""

    __slots__ = ("_decoded", "_members", "_render", "count", "rest")

    def __init__(
        self, members: bytes | Callable[[], bytes], count: int, rest: Mapping[str, int]
    ) -> None:
        self._members: bytes | None = members if isinstance(members, bytes) else None
        self._render: Callable[[], bytes] | None = None if isinstance(members, bytes) else members
        self.count = count
        self.rest: Mapping[str, int] = dict(rest)
        self._decoded: dict[str, int] | None = None

    @property
    def members(self) -> bytes:
        """The rendered text (two threads asking at once may both render it: the same bytes)."""
        members = self._members
        if members is None:
            render = self._render
            # None: another thread rendered meanwhile (it sets the text before dropping this).
            members = render() if render is not None else self._members
            assert members is not None
            self._members, self._render = members, None
        return members

    def json_members(self) -> bytes:
        """Everything between the braces of the JSON object these properties are."""
        rest = json.dumps(self.rest, separators=(",", ":"))[1:-1].encode()
        return b",".join(part for part in (self.members, rest) if part)

    def _items(self) -> dict[str, int]:
        if self._decoded is None:
            decoded: dict[str, int] = json.loads(b"{" + self.members + b"}")
            decoded.update(self.rest)
            self._decoded = decoded
        return self._decoded

    def __getitem__(self, name: str) -> int:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return self.count + len(self.rest)  # no decode: a cursor asks whether there are any


def copy_properties(properties: Mapping[str, int]) -> Mapping[str, int]:
    """A copy of ``properties`` a cursor may keep (its caller may change a dict), as a dict;
    rendered ones are returned as they are: read-only, and a copy would decode them."""
    if isinstance(properties, RenderedProperties):
        return properties
    return dict(properties)


@dataclass(slots=True)
class CursorState:
    """Everything a durable cursor persists."""

    name: str
    mark_delete: Position
    properties: Mapping[str, int] = field(default_factory=dict)
    ranges: list[EntryRange] = field(default_factory=list)
    batch: dict[Position, list[int]] = field(default_factory=dict)


def encode_cursor_document(state: CursorState, max_ranges: int, max_batch: int) -> bytes:
    """The JSON document of ``state``, keeping the lowest ``max_ranges``/``max_batch`` items."""
    batch_positions = sorted(state.batch)[:max_batch]
    head = {"name": state.name, "mark_delete": list(state.mark_delete)}
    tail = {
        "ranges": [list(item) for item in state.ranges[:max_ranges]],
        "batch": [[p.ledger_id, p.entry_id, state.batch[p]] for p in batch_positions],
    }
    properties = state.properties
    # Not sort_keys: the properties of the idempotency cursor hold ~100,000 keys, and sorting
    # them cost more than the encoding (17 against 7 ms); readers do not depend on the order.
    if not isinstance(properties, RenderedProperties):
        return _json({**head, "properties": properties, **tail})
    # The same document, its properties' text spliced in between the other members'.
    return b"".join(
        (
            _json(head)[:-1],
            b',"properties":{',
            properties.json_members(),
            b"},",
            _json(tail)[1:],
        )
    )


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def log_record(document: bytes) -> bytes:
    """One record of the cursor log: ``length | crc32c | document``."""
    length = struct.pack("<I", len(document))
    return length + struct.pack("<I", crc32c.crc32c(document, crc32c.crc32c(length))) + document


def log_header() -> bytes:
    return LOG_HEADER.pack(CURSOR_LOG_MAGIC, CURSOR_LOG_VERSION, 0)


def next_record_offset(end: int) -> int:
    """Where the record after one ending at ``end`` starts (the next 512-byte boundary)."""
    return -(-end // RECORD_ALIGNMENT) * RECORD_ALIGNMENT


def decode_cursor_state(data: bytes, path: Path) -> CursorState:
    """The state a cursor file holds, in either format; raises ``CorruptCursorError`` naming
    ``path`` if it is damaged."""
    if data[:4] == CURSOR_LOG_MAGIC:
        document, _end = read_cursor_log(data, path)
    else:
        document = decode_checked(CURSOR_MAGIC, data, path, CorruptCursorError)
    return decode_cursor_document(document, path)


def read_cursor_log(data: bytes, path: Path) -> tuple[bytes, int]:
    """The last record's document of a cursor log and the offset where that record ends."""
    if len(data) < LOG_HEADER.size:
        raise CorruptCursorError(path, 0, f"file too short ({len(data)} bytes)")
    _magic, version, reserved = LOG_HEADER.unpack_from(data)
    if version != CURSOR_LOG_VERSION or reserved != 0:
        raise CorruptCursorError(path, 4, f"unsupported cursor log version {version}.{reserved}")
    offset = LOG_HEADER.size
    last: tuple[bytes, int] | None = None
    while True:
        document = _record_at(data, offset)
        if document is None:
            break
        end = offset + RECORD_HEADER.size + len(document)
        last = (document, end)
        offset = next_record_offset(end)
    if last is None:
        raise CorruptCursorError(path, offset, "the log's first record is damaged")
    _refuse_records_after(data, offset, path)
    if any(data[offset : offset + RECORD_HEADER.size]):
        log.warning(
            "cursor log %s: the record at offset %d is incomplete (a save cut short by a crash); "
            "the state saved before it is used",
            path,
            offset,
        )
    return last


def _record_at(data: bytes, offset: int) -> bytes | None:
    """The document of a valid record at ``offset``, None if there is none (end, torn, bad)."""
    if offset + RECORD_HEADER.size > len(data):
        return None
    length, crc = RECORD_HEADER.unpack_from(data, offset)
    start = offset + RECORD_HEADER.size
    if length == 0 or length > len(data) - start:
        return None
    document = data[start : start + length]
    if crc32c.crc32c(document, crc32c.crc32c(data[offset : offset + 4])) != crc:
        return None
    return document


def _refuse_records_after(data: bytes, end_of_log: int, path: Path) -> None:
    """A valid record past the slot that ended the log means damage in the middle (see the
    module docstring); zero words are skipped without a checksum."""
    for offset in range(end_of_log + RECORD_ALIGNMENT, len(data), RECORD_ALIGNMENT):
        if data[offset : offset + 4] != b"\0\0\0\0" and _record_at(data, offset) is not None:
            raise CorruptCursorError(
                path, end_of_log, f"damaged record before a valid one at offset {offset}"
            )


def decode_cursor_document(document: bytes, path: Path) -> CursorState:
    """Parse a cursor's JSON document; raises ``CorruptCursorError`` naming ``path``."""
    try:
        parsed: dict[str, Any] = json.loads(document)
        state = CursorState(
            name=str(parsed["name"]),
            mark_delete=Position(int(parsed["mark_delete"][0]), int(parsed["mark_delete"][1])),
            properties={str(k): int(v) for k, v in parsed["properties"].items()},
            ranges=[EntryRange(int(lid), int(f), int(t)) for lid, f, t in parsed["ranges"]],
            batch={
                Position(int(lid), int(e)): [int(w) for w in words]
                for lid, e, words in parsed["batch"]
            },
        )
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise CorruptCursorError(path, 0, f"undecodable cursor state: {exc}") from exc
    _check_ranges(state.ranges, path)
    return state


def _check_ranges(ranges: list[EntryRange], path: Path) -> None:
    """Reject range lists that break the ``PositionRangeSet`` invariant."""
    previous: EntryRange | None = None
    for item in ranges:
        if item.first_entry > item.last_entry or item.first_entry < 0:
            raise CorruptCursorError(path, 0, f"invalid range {tuple(item)}")
        if previous is not None and (
            item.first <= previous.last
            or (
                item.ledger_id == previous.ledger_id and item.first_entry == previous.last_entry + 1
            )
        ):
            raise CorruptCursorError(path, 0, f"ranges out of order at {tuple(item)}")
        previous = item
