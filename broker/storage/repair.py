"""Cut a damaged ledger to its longest valid prefix: the storage side of ``repair-topic``.

``Ledger.open`` refuses a ledger whose sealed segments or metadata are damaged and drops
nothing. This module is the way forward it leaves, and it only ever runs on an operator's
command: ``plan_repair`` reads the directory and says exactly what a repair would keep and drop
(the dry run); ``apply_repair`` carries such a plan out.

**Longest valid prefix.** The segments ``ledger.meta`` lists, in ledger-id order, are checked as
``open`` checks them (file present, header, size, whole-region crc). The first that fails is
scanned record by record and keeps the records before its first bad one. Everything after that
record is dropped: the rest of that segment, every later sealed segment and any unsealed segment
(the previous active one), even when those are intact. Consumers, readers and PIP-6 replay rely
on a log without holes, and a prefix is the one state the topic is known to have been in.

**Nothing is destroyed.** Before anything is cut, dropped bytes go to a quarantine folder next to
a manifest (``repair.json``, the plan): later segment files are moved there whole, and the tail
of the damaged segment (from its first bad record) is copied there.

**Order** (each step durable before the next): quarantine folder and manifest; copy of the damaged
tail; later segments moved (both directories fsynced, or a power loss could bring the files back
to be deleted as trim leftovers); the placeholder; the damaged segment truncated and fsynced;
``ledger.meta`` rewritten atomically. Only the last step makes the ledger open again, so a crash
anywhere before it leaves a ledger that ``open`` still refuses, and planning again finishes the
job (segments already moved are reported as missing).

**Ledger ids stay reserved.** ``open`` starts its next ledger after the highest id it knows. If
the dropped segments had higher ids than every kept one, the highest of them is kept as an empty
sealed segment (a header-only file, a *placeholder*): a position a client or cursor still
remembers from the dropped data can never name new data.

**Cursors are not rewritten.** A cursor whose mark-delete lies beyond the new end is pulled back
by the next ``open`` (``Cursor._clamp``, as after a power loss without fsync), which also makes
PIP-6 rebuild its state by replaying the kept entries (``was_clamped``); clamping here would hide
that from it. The plan lists these cursors.

**Reported, not repaired:** a damaged ``ledger.meta`` (the sealed list, entry counts and crcs are
then unknown, so there is no prefix to keep) and damaged cursor files (they hold subscription
state that no cut can restore). The dedup snapshot is the exception the broker already handles:
it is set aside and rebuilt at load.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from broker.storage.cursor_file import decode_cursor_state
from broker.storage.cursor_registry import CURSOR_DIR, CURSOR_SUFFIX, cursor_file
from broker.storage.errors import CorruptLedgerError
from broker.storage.files import (
    FileLayer,
    OsFileLayer,
    atomic_write,
    ensure_directory,
    list_files,
    parse_segment_file_name,
    read_file,
    segment_file_name,
    write_all,
)
from broker.storage.ledger_meta_file import (
    LedgerMetadata,
    SealedLedger,
    current_metadata_path,
    decode_metadata,
    encode_metadata,
)
from broker.storage.position import Position
from broker.storage.recovery import RECORD_HEADER, RECORD_HEADER_SIZE, scan_valid_prefix
from broker.storage.segment import HEADER_SIZE, encode_segment_header, header_problem, mapped

MANIFEST_NAME = "repair.json"
DEDUP_CURSOR = "pulsar.dedup"  # its snapshot is rebuilt by the broker (dedup_recovery)
_COPY_CHUNK = 8 << 20


class RepairError(Exception):
    """The ledger cannot be repaired by cutting (see ``RepairPlan.blocking``)."""


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


# ============================================================================ planning


@dataclass(frozen=True, slots=True)
class _SealedCheck:
    """One sealed segment checked against its metadata row."""

    info: SealedLedger
    path: Path
    damage: Damage | None = None
    kept: SealedLedger | None = None  # the row to keep (None: the file goes entirely)
    file_size: int = 0


def plan_repair(directory: Path) -> RepairPlan:
    """Read ``directory`` and decide what a repair keeps and drops. Changes nothing.

    Reads every byte of the sealed segments up to and including the damaged one (as
    ``Ledger.open`` with verification does); later segments are only counted.

    Raises:
        FileNotFoundError: ``directory`` does not exist.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"no ledger directory {directory}")
    damaged_cursors = tuple(_damaged_cursor_files(directory))
    meta_path = current_metadata_path(directory)
    try:
        meta = decode_metadata(read_file(meta_path), meta_path)
    except FileNotFoundError:
        meta = LedgerMetadata()
    except CorruptLedgerError as exc:
        return RepairPlan(directory, blocking=(Damage.of(exc),), damaged_cursors=damaged_cursors)

    kept: list[SealedLedger] = []
    crc_fixes: list[int] = []
    first_bad: _SealedCheck | None = None
    for info in meta.ledgers:
        check = _check_sealed(directory / segment_file_name(info.ledger_id), info)
        if check.damage is None and check.kept is not None:
            kept.append(check.kept)
            if check.kept.crc != info.crc:
                crc_fixes.append(info.ledger_id)
            continue
        first_bad = check
        break
    if first_bad is None:
        return RepairPlan(
            directory,
            metadata=meta,
            sealed=tuple(kept),
            kept_entries=sum(i.entries for i in kept),
            new_end=_last_position(kept) or meta.last_trimmed,
            crc_fixes=tuple(crc_fixes),
            damaged_cursors=damaged_cursors,
        )
    return _plan_cut(directory, meta, kept, crc_fixes, first_bad, damaged_cursors)


def _plan_cut(
    directory: Path,
    meta: LedgerMetadata,
    kept: list[SealedLedger],
    crc_fixes: list[int],
    bad: _SealedCheck,
    damaged_cursors: tuple[Damage, ...],
) -> RepairPlan:
    dropped: list[DroppedEntries] = []
    move: list[Path] = []
    truncate: Truncation | None = None
    if bad.kept is not None:  # the header is sound: keep the records before the bad one
        kept.append(bad.kept)
        if bad.file_size != bad.kept.data_end:
            truncate = Truncation(bad.path, bad.file_size, bad.kept.data_end)
        dropped.append(
            DroppedEntries(
                bad.info.ledger_id,
                bad.kept.entries,
                max(0, bad.info.entries - bad.kept.entries),
                max(0, bad.info.data_end - bad.kept.data_end),
                bad.path,
                bad.kept.data_end,
                "the first bad record and everything after it",
            )
        )
    else:
        why = "file missing" if not bad.path.exists() else "segment header damaged"
        dropped.append(_whole(bad.info, bad.path, why))
        if bad.path.exists():
            move.append(bad.path)
    later = meta.ledgers[meta.ledgers.index(bad.info) + 1 :]
    for info in later:
        path = directory / segment_file_name(info.ledger_id)
        present = path.is_file()
        why = "after the damage" if present else "after the damage; file already missing"
        dropped.append(_whole(info, path, why))
        if present:
            move.append(path)
    for ledger_id, path in _unsealed_after(directory, meta):
        dropped.append(_unsealed(ledger_id, path))
        move.append(path)
    placeholder = _placeholder_id(meta, kept, dropped)
    new_end = _last_position(kept) or meta.last_trimmed
    return RepairPlan(
        directory,
        damage=bad.damage,
        metadata=meta,
        sealed=tuple(kept),
        kept_entries=sum(i.entries for i in kept),
        new_end=new_end,
        dropped=tuple(dropped),
        truncate=truncate,
        move=tuple(move),
        placeholder=placeholder,
        crc_fixes=tuple(crc_fixes),
        cursors_beyond_end=tuple(_cursors_beyond(directory, new_end)),
        damaged_cursors=damaged_cursors,
    )


def _check_sealed(path: Path, info: SealedLedger) -> _SealedCheck:
    """Check one sealed segment as ``Segment.verify`` does; on damage, find the valid prefix."""
    if not path.is_file():
        return _SealedCheck(info, path, Damage(path, 0, "sealed segment file is missing"))
    with mapped(path) as view:
        size = len(view)
        problem = header_problem(view, info.ledger_id)
        if problem is not None:
            return _SealedCheck(info, path, Damage(path, 0, problem), file_size=size)
        if size >= info.data_end and crc32c.crc32c(view[HEADER_SIZE : info.data_end]) == info.crc:
            return _SealedCheck(info, path, kept=info, file_size=size)
        region_end = min(size, info.data_end)
        scan = scan_valid_prefix(view[HEADER_SIZE:region_end], base=HEADER_SIZE)
        end = HEADER_SIZE + scan.valid_bytes
        crc = crc32c.crc32c(view[HEADER_SIZE:end])
        cut = size < info.data_end and _runs_past(view, end, region_end)
    row = SealedLedger(info.ledger_id, len(scan.offsets), end, crc, info.sealed_at_ms)
    if end == info.data_end and len(scan.offsets) == info.entries:
        return _SealedCheck(info, path, kept=row, file_size=size)  # only the recorded crc was off
    if cut:
        reason = f"file is cut at {size} bytes, its sealed size is {info.data_end}"
    else:
        reason = "invalid record in a sealed segment"
    return _SealedCheck(info, path, Damage(path, end, reason), kept=row, file_size=size)


def _runs_past(view: memoryview, offset: int, end: int) -> bool:
    """Whether the record at ``offset`` (header or body) does not fit before ``end``."""
    if offset + RECORD_HEADER_SIZE > end:
        return True
    length, _crc = RECORD_HEADER.unpack_from(view, offset)
    return bool(offset + RECORD_HEADER_SIZE + length > end)


def _whole(info: SealedLedger, path: Path, why: str) -> DroppedEntries:
    return DroppedEntries(
        info.ledger_id, 0, info.entries, info.data_end - HEADER_SIZE, path, HEADER_SIZE, why
    )


def _unsealed_after(directory: Path, meta: LedgerMetadata) -> Iterator[tuple[int, Path]]:
    """Segment files newer than everything ``ledger.meta`` knows: the previous active segment
    (older unlisted files are trim leftovers, which ``open`` deletes anyway)."""
    listed = [i.ledger_id for i in meta.ledgers]
    trimmed = meta.last_trimmed.ledger_id if meta.last_trimmed else 0
    horizon = max([trimmed, *listed])
    for path in list_files(directory):
        ledger_id = parse_segment_file_name(path.name)
        if ledger_id is not None and ledger_id > horizon:
            yield ledger_id, path


def _unsealed(ledger_id: int, path: Path) -> DroppedEntries:
    """An unsealed segment counted as recovery would: the longest valid prefix of records."""
    with mapped(path) as view:
        if header_problem(view, ledger_id) is not None:
            entries, nbytes = 0, 0
        else:
            scan = scan_valid_prefix(view[HEADER_SIZE:], base=HEADER_SIZE)
            entries, nbytes = len(scan.offsets), scan.valid_bytes
    why = "unsealed segment (the previous active one), after the damage"
    return DroppedEntries(ledger_id, 0, entries, nbytes, path, HEADER_SIZE, why)


def _placeholder_id(
    meta: LedgerMetadata, kept: list[SealedLedger], dropped: list[DroppedEntries]
) -> int | None:
    """The id to keep as an empty segment, if a dropped segment's id is above every id the
    repaired ledger still knows (so ``open`` would otherwise hand it out again)."""
    kept_ids = {i.ledger_id for i in kept}
    gone = [d.ledger_id for d in dropped if d.ledger_id not in kept_ids]
    known = max([meta.last_trimmed.ledger_id if meta.last_trimmed else 0, *kept_ids])
    highest = max(gone, default=0)
    return highest if highest > known else None


def _last_position(kept: list[SealedLedger]) -> Position | None:
    for info in reversed(kept):
        if info.entries:
            return Position(info.ledger_id, info.entries - 1)
    return None


def _cursor_files(directory: Path) -> list[Path]:
    folder = directory / CURSOR_DIR
    if not folder.is_dir():
        return []
    return [p for p in list_files(folder) if p.name.endswith(CURSOR_SUFFIX)]


def _damaged_cursor_files(directory: Path) -> Iterator[Damage]:
    for path in _cursor_files(directory):
        try:
            decode_cursor_state(read_file(path), path)
        except CorruptLedgerError as exc:
            yield Damage.of(exc)


def _cursors_beyond(directory: Path, new_end: Position | None) -> Iterator[CursorNote]:
    """Durable cursors that the next ``open`` will pull back (``CursorRegistry.load_all``)."""
    for path in _cursor_files(directory):
        try:
            state = decode_cursor_state(read_file(path), path)
        except CorruptLedgerError:
            continue  # reported as a damaged cursor file
        beyond = state.mark_delete.entry_id >= 0 if new_end is None else state.mark_delete > new_end
        if beyond:
            yield CursorNote(state.name, state.mark_delete)


# ============================================================================ applying


def apply_repair(
    plan: RepairPlan,
    quarantine: Path,
    *,
    file_layer: FileLayer | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Carry out ``plan`` (see the module docstring for the order of the steps).

    The caller must hold the directory's ``LedgerLock`` from planning to the end, so that no
    broker opens the ledger in between. ``quarantine`` must not exist yet (one per repair).

    Raises:
        RepairError: the plan cannot be carried out (damaged ``ledger.meta``) or has nothing
            to do.
        OSError: a file operation failed; the ledger is then still refused by ``open`` and
            planning again continues where this stopped.
    """
    if plan.blocking:
        raise RepairError(f"cannot repair {plan.directory}: {plan.blocking[0]}")
    if not plan.needs_repair or plan.metadata is None:
        raise RepairError(f"nothing to repair in {plan.directory}")
    layer = file_layer or OsFileLayer()
    ensure_directory(layer, quarantine)
    atomic_write(layer, quarantine / MANIFEST_NAME, _manifest(plan, clock))
    if plan.truncate is not None:
        _copy_tail(layer, plan.truncate, quarantine)
    for path in plan.move:
        layer.replace(path, quarantine / path.name)
    if plan.move:
        layer.fsync_dir(quarantine)
        layer.fsync_dir(plan.directory)
    sealed = list(plan.sealed)
    if plan.placeholder is not None:
        sealed.append(_write_placeholder(layer, plan.directory, plan.placeholder, clock))
    if plan.truncate is not None:
        _truncate(layer, plan.truncate)
    repaired = LedgerMetadata(
        ledgers=tuple(sealed),
        properties=dict(plan.metadata.properties),
        last_trimmed=plan.metadata.last_trimmed,
    )
    # The current file (cluster mode: the last owner's epoch), so the repair is what loads.
    target = current_metadata_path(plan.directory)
    atomic_write(layer, target, encode_metadata(repaired))


def _manifest(plan: RepairPlan, clock: Callable[[], float]) -> bytes:
    document = {"repairedAt": clock(), "plan": plan.to_json()}
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def _copy_tail(layer: FileLayer, cut: Truncation, quarantine: Path) -> None:
    """Copy the bytes the truncation removes to ``<name>.from-<offset>`` in the quarantine."""
    if cut.size <= cut.new_size:
        return
    target = quarantine / f"{cut.path.name}.from-{cut.new_size}"
    source = os.open(cut.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd = layer.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            offset = cut.new_size
            while offset < cut.size:
                chunk = os.pread(source, min(_COPY_CHUNK, cut.size - offset), offset)
                if not chunk:
                    break
                write_all(layer, fd, chunk, offset - cut.new_size)
                offset += len(chunk)
            layer.fsync(fd)
        finally:
            layer.close(fd)
    finally:
        os.close(source)
    layer.fsync_dir(quarantine)


def _write_placeholder(
    layer: FileLayer, directory: Path, ledger_id: int, clock: Callable[[], float]
) -> SealedLedger:
    """A header-only segment file for ``ledger_id``, durable, and its metadata row."""
    path = directory / segment_file_name(ledger_id)
    atomic_write(layer, path, encode_segment_header(ledger_id))
    return SealedLedger(ledger_id, 0, HEADER_SIZE, 0, int(clock() * 1000))


def _truncate(layer: FileLayer, cut: Truncation) -> None:
    fd = layer.open(cut.path, os.O_RDWR)
    try:
        layer.ftruncate(fd, cut.new_size)
        layer.fsync(fd)
    finally:
        layer.close(fd)


def _text(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"
