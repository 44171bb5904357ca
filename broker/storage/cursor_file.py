"""Persistent form of a durable cursor and its (bounded) encoding.

A cursor file is a checked file (see ``files``) holding JSON::

    {"name": ..., "mark_delete": [l, e], "properties": {...},
     "ranges": [[l, first, last], ...], "batch": [[l, e, [word, ...]], ...]}

Bounds (Pulsar's ``managedLedgerMaxUnackedRangesToPersist`` and
``managedLedgerMaxBatchDeletedIndexToPersist``): only the lowest ``max_ranges`` individually
deleted ranges and the lowest ``max_batch`` partially acknowledged entries are written. What lies
beyond is lost on restart and those messages are delivered again: at-least-once, never loss. The
lowest ones are kept because they are the ones holding the mark-delete position back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.storage.errors import CorruptCursorError
from broker.storage.files import decode_checked, encode_checked
from broker.storage.position import Position
from broker.storage.ranges import EntryRange

CURSOR_MAGIC = b"MGCR"


@dataclass(slots=True)
class CursorState:
    """Everything a durable cursor persists."""

    name: str
    mark_delete: Position
    properties: dict[str, int] = field(default_factory=dict)
    ranges: list[EntryRange] = field(default_factory=list)
    batch: dict[Position, list[int]] = field(default_factory=dict)


def encode_cursor_state(state: CursorState, max_ranges: int, max_batch: int) -> bytes:
    """Checked-file bytes for ``state``, keeping the lowest ``max_ranges``/``max_batch`` items."""
    batch_positions = sorted(state.batch)[:max_batch]
    document = {
        "name": state.name,
        "mark_delete": list(state.mark_delete),
        "properties": state.properties,
        "ranges": [list(item) for item in state.ranges[:max_ranges]],
        "batch": [[p.ledger_id, p.entry_id, state.batch[p]] for p in batch_positions],
    }
    # Not sort_keys: the properties of the idempotency cursor hold ~20,000 keys, and sorting
    # them cost more than the encoding (17 against 7 ms); readers do not depend on the order.
    payload = json.dumps(document, separators=(",", ":")).encode()
    return encode_checked(CURSOR_MAGIC, payload)


def decode_cursor_state(data: bytes, path: Path) -> CursorState:
    """Parse a cursor file; raises ``CorruptCursorError`` naming ``path`` if it is damaged."""
    payload = decode_checked(CURSOR_MAGIC, data, path, CorruptCursorError)
    try:
        document: dict[str, Any] = json.loads(payload)
        state = CursorState(
            name=str(document["name"]),
            mark_delete=Position(int(document["mark_delete"][0]), int(document["mark_delete"][1])),
            properties={str(k): int(v) for k, v in document["properties"].items()},
            ranges=[EntryRange(int(lid), int(f), int(t)) for lid, f, t in document["ranges"]],
            batch={
                Position(int(lid), int(e)): [int(w) for w in words]
                for lid, e, words in document["batch"]
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
