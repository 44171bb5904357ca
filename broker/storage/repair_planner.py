"""Planning a repair: read a damaged ledger's directory and decide its longest valid prefix.

``plan_repair`` checks the sealed segments as ``Ledger.open`` does and scans the first damaged
one record by record; everything after its first bad record is dropped (see
``broker.storage.repair`` for why a prefix, and for how the plan is carried out). It only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from broker.storage.cursor_file import decode_cursor_state
from broker.storage.cursor_registry import CURSOR_DIR, CURSOR_SUFFIX
from broker.storage.errors import CorruptLedgerError
from broker.storage.files import list_files, parse_segment_file_name, read_file, segment_file_name
from broker.storage.ledger_meta_file import (
    LedgerMetadata,
    SealedLedger,
    current_metadata_path,
    decode_metadata,
)
from broker.storage.position import Position
from broker.storage.recovery import RECORD_HEADER, RECORD_HEADER_SIZE, scan_valid_prefix
from broker.storage.repair_plan import CursorNote, Damage, DroppedEntries, RepairPlan, Truncation
from broker.storage.segment import HEADER_SIZE, header_problem, mapped


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
