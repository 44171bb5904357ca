"""What a repair of a damaged ledger keeps, drops and changes: ``RepairPlan`` and its parts, as
data, as the manifest's JSON and as the lines ``repair-topic`` prints.

``broker.storage.repair_planner.plan_repair`` builds a plan; ``broker.storage.repair`` carries
it out (the whole procedure is described there).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.storage.cursor_registry import cursor_file
from broker.storage.errors import CorruptLedgerError
from broker.storage.ledger_meta_file import LedgerMetadata, SealedLedger
from broker.storage.position import Position

DEDUP_CURSOR = "pulsar.dedup"  # its snapshot is rebuilt at load (publish/dedup_snapshot.py)


@dataclass(frozen=True, slots=True)
class Damage:
    """Where a file first fails its check, as ``CorruptLedgerError`` reports it."""

    path: Path
    offset: int
    reason: str

    @classmethod
    def of(cls, error: CorruptLedgerError) -> Damage:
        return cls(error.path, error.offset, error.reason)

    def __str__(self) -> str:
        return f"{self.path} at byte offset {self.offset}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"file": str(self.path), "offset": self.offset, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class DroppedEntries:
    """Entries ``ledger_id:first_entry`` .. ``ledger_id:last_entry`` that the repair removes.

    ``nbytes`` counts their records (headers included) as the metadata or a scan knows them;
    they start at byte ``offset`` of ``path`` (which may be missing already).
    """

    ledger_id: int
    first_entry: int
    entries: int
    nbytes: int
    path: Path
    offset: int
    why: str

    @property
    def last_entry(self) -> int:
        return self.first_entry + self.entries - 1

    @property
    def span(self) -> str:
        if self.entries == 0:
            return f"{self.ledger_id}:- (no entries)"
        first = f"{self.ledger_id}:{self.first_entry}"
        return first if self.entries == 1 else f"{first}..{self.ledger_id}:{self.last_entry}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "firstEntry": self.first_entry,
            "lastEntry": self.last_entry if self.entries else None,
            "entries": self.entries,
            "bytes": self.nbytes,
            "file": str(self.path),
            "offset": self.offset,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class CursorNote:
    """A durable cursor whose mark-delete lies beyond the new end of the log."""

    name: str
    mark_delete: Position

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "markDelete": _text(self.mark_delete)}


@dataclass(frozen=True, slots=True)
class Truncation:
    """Cut ``path`` from ``size`` to ``new_size`` bytes (its first bad record)."""

    path: Path
    size: int
    new_size: int


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What a repair of the ledger in ``directory`` keeps, drops and changes. Build with
    ``plan_repair``; ``needs_repair`` False means the data and metadata are intact."""

    directory: Path
    damage: Damage | None = None
    metadata: LedgerMetadata | None = None
    sealed: tuple[SealedLedger, ...] = ()
    kept_entries: int = 0
    new_end: Position | None = None
    dropped: tuple[DroppedEntries, ...] = ()
    truncate: Truncation | None = None
    move: tuple[Path, ...] = ()
    placeholder: int | None = None
    crc_fixes: tuple[int, ...] = ()
    cursors_beyond_end: tuple[CursorNote, ...] = ()
    blocking: tuple[Damage, ...] = ()
    damaged_cursors: tuple[Damage, ...] = ()

    @property
    def needs_repair(self) -> bool:
        return self.damage is not None or bool(self.crc_fixes)

    @property
    def blocking_cursors(self) -> tuple[Damage, ...]:
        """Damaged cursor files that keep the topic from opening (all but the dedup snapshot,
        which the broker sets aside and rebuilds)."""
        dedup = cursor_file(self.directory, DEDUP_CURSOR)
        return tuple(d for d in self.damaged_cursors if d.path != dedup)

    @property
    def dropped_entries(self) -> int:
        return sum(d.entries for d in self.dropped)

    @property
    def dropped_bytes(self) -> int:
        return sum(d.nbytes for d in self.dropped)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "needsRepair": self.needs_repair,
            "damage": self.damage.to_json() if self.damage else None,
            "keptEntries": self.kept_entries,
            "newLastEntry": _text(self.new_end) if self.new_end else None,
            "droppedEntries": self.dropped_entries,
            "droppedBytes": self.dropped_bytes,
            "dropped": [d.to_json() for d in self.dropped],
            "truncate": (
                {
                    "file": str(self.truncate.path),
                    "fromBytes": self.truncate.size,
                    "toBytes": self.truncate.new_size,
                }
                if self.truncate
                else None
            ),
            "moveToQuarantine": [str(p) for p in self.move],
            "placeholderLedgerId": self.placeholder,
            "crcCorrectedLedgerIds": list(self.crc_fixes),
            "cursorsBeyondEnd": [c.to_json() for c in self.cursors_beyond_end],
            "unrepairable": [d.to_json() for d in self.blocking],
            "damagedCursorFiles": [d.to_json() for d in self.damaged_cursors],
        }

    def describe(self) -> list[str]:
        """Human-readable lines: the damage, what is kept, each dropped range, the side effects."""
        return list(self._describe())

    def _describe(self) -> Iterator[str]:
        if self.blocking:
            yield from (f"cannot repair: {problem}" for problem in self.blocking)
            yield (
                "  the segment list, entry counts and checksums in ledger.meta are unknown, so "
                "there is no valid prefix to cut to; restore ledger.meta from a backup"
            )
            return
        if self.needs_repair:
            yield from self._describe_cut()
        else:
            yield "no damage found in the segments or ledger.meta: nothing to repair"
        blocking = self.blocking_cursors
        for damaged in self.damaged_cursors:
            if damaged in blocking:
                yield f"damaged cursor file, not repaired by this command: {damaged}"
            else:
                yield f"damaged dedup snapshot (set aside and rebuilt at load): {damaged}"

    def _describe_cut(self) -> Iterator[str]:
        if self.damage is not None:
            yield f"damage: {self.damage}"
        end = _text(self.new_end) if self.new_end else "none"
        yield f"keeps {self.kept_entries} entries (last entry kept: {end})"
        yield f"drops {self.dropped_entries} entries ({self.dropped_bytes} bytes):"
        for item in self.dropped:
            yield (
                f"  {item.span}: {item.entries} entries, {item.nbytes} bytes, "
                f"{item.path.name} from byte offset {item.offset} ({item.why})"
            )
        for ledger_id in self.crc_fixes:
            yield (
                f"ledger {ledger_id}: every record is valid but ledger.meta holds a wrong "
                "checksum for it; the checksum is recomputed (nothing dropped)"
            )
        if self.truncate is not None:
            t = self.truncate
            yield f"truncates {t.path.name} from {t.size} to {t.new_size} bytes"
        if self.placeholder is not None:
            yield (
                f"keeps ledger id {self.placeholder} as an empty segment, so no position of "
                "the dropped data is ever used again"
            )
        for note in self.cursors_beyond_end:
            dedup = " (dedup state is rebuilt from the kept entries)"
            yield (
                f"cursor {note.name!r}: mark-delete {_text(note.mark_delete)} is beyond the new "
                f"end; the next load pulls it back to {end}"
                + (dedup if note.name == DEDUP_CURSOR else "")
            )


def _text(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"
