"""``repair-topic`` at the storage level: plan exactly what is kept and dropped, cut durably,
keep ledger ids reserved, move dropped bytes aside, and survive a crash at every step."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import pytest

from broker.storage import CorruptLedgerError, Ledger, LedgerConfig, Position
from broker.storage.files import segment_file_name
from broker.storage.ledger_meta_file import (
    METADATA_FILE_NAME,
    LedgerMetadata,
    decode_metadata,
    encode_metadata,
)
from broker.storage.lock import LedgerLock
from broker.storage.recovery import RECORD_HEADER_SIZE
from broker.storage.repair import (
    MANIFEST_NAME,
    RepairError,
    RepairPlan,
    apply_repair,
    plan_repair,
)
from broker.storage.segment import HEADER_SIZE
from protocol.enums import InitialPosition
from tests.broker.storage.faults import (
    InlineExecutor,
    NoSyncLayer,
    SimulatedCrash,
    SimulatedDisk,
    flip_bit,
)

CONFIG = LedgerConfig(max_entries_per_ledger=8, preallocate_bytes=2048)
Entries = list[tuple[Position, bytes]]


def _open(directory: Path) -> Ledger:
    return Ledger.open(directory, CONFIG, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


def _read_all(directory: Path) -> Entries:
    ledger = _open(directory)
    try:
        return list(ledger.iter_entries(Position(0, -1)))
    finally:
        ledger.close()


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.fixture
def pristine(tmp_path: Path) -> tuple[Path, Entries]:
    """A closed ledger: 4 sealed segments (8, 8, 8, 6 entries), a cursor near the end, a
    cursor at the start, a property. Returns the directory and every entry in order."""
    rng = random.Random(7)
    directory = tmp_path / "pristine"
    ledger = _open(directory)
    for _ in range(30):
        ledger.append(rng.randbytes(rng.randint(1, 60)))
    ledger.flush()
    ledger.open_cursor("late", InitialPosition.Earliest).mark_delete(Position(4, 2), {"k": 1})
    ledger.open_cursor("early", InitialPosition.Earliest).mark_delete(Position(1, 1))
    ledger.set_property("pulsar.topic_epoch", 3)
    entries = list(ledger.iter_entries(Position(0, -1)))
    ledger.close()
    assert [p.ledger_id for p, _ in entries] == [1] * 8 + [2] * 8 + [3] * 8 + [4] * 6
    return directory, entries


def _record_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, offset = [], HEADER_SIZE
    while offset < len(data):
        offsets.append(offset)
        offset += RECORD_HEADER_SIZE + int.from_bytes(data[offset : offset + 4], "little")
    return offsets


def _expected_prefix(entries: Entries, ledger_id: int, kept_in_ledger: int) -> Entries:
    return [
        (p, d)
        for p, d in entries
        if p.ledger_id < ledger_id or (p.ledger_id == ledger_id and p.entry_id < kept_in_ledger)
    ]


def _repair(directory: Path, quarantine: Path) -> RepairPlan:
    plan = plan_repair(directory)
    apply_repair(plan, quarantine, file_layer=NoSyncLayer())
    return plan


# ----------------------------------------------------------------------------- the plan


def test_a_bit_flip_plans_the_exact_prefix_and_every_dropped_range(
    pristine: tuple[Path, Entries],
) -> None:
    directory, entries = pristine
    segment = directory / segment_file_name(2)
    offsets = _record_offsets(segment)
    flip_bit(segment, (offsets[5] + RECORD_HEADER_SIZE) * 8)  # inside entry 2:5
    before = _snapshot(directory)

    plan = plan_repair(directory)

    assert _snapshot(directory) == before  # planning changes nothing
    assert plan.damage is not None
    assert (plan.damage.path, plan.damage.offset) == (segment, offsets[5])
    assert plan.kept_entries == 13
    assert plan.new_end == Position(2, 4)
    spans = [(d.ledger_id, d.first_entry, d.entries, d.path.name, d.offset) for d in plan.dropped]
    assert spans == [
        (2, 5, 3, segment.name, offsets[5]),
        (3, 0, 8, segment_file_name(3), HEADER_SIZE),
        (4, 0, 6, segment_file_name(4), HEADER_SIZE),
    ]
    sizes = {p: len(d) for p, d in entries}
    assert plan.dropped_entries == 17
    assert plan.dropped_bytes == sum(
        RECORD_HEADER_SIZE + sizes[p] for p, _ in entries if p > Position(2, 4)
    )
    assert plan.truncate is not None
    assert plan.truncate.new_size == offsets[5]
    assert plan.move == (directory / segment_file_name(3), directory / segment_file_name(4))
    assert plan.placeholder == 4
    assert [c.name for c in plan.cursors_beyond_end] == ["late"]
    text = "\n".join(plan.describe())
    assert f"at byte offset {offsets[5]}" in text
    assert "2:5..2:7: 3 entries" in text
    assert "4:0..4:5: 6 entries" in text


def test_repair_serves_exactly_the_valid_prefix_and_keeps_everything_else(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    original = _snapshot(directory)
    segment = directory / segment_file_name(2)
    offsets = _record_offsets(segment)
    flip_bit(segment, (offsets[5] + RECORD_HEADER_SIZE) * 8 + 3)
    damaged = segment.read_bytes()
    quarantine = tmp_path / "quarantine"

    _repair(directory, quarantine)

    assert _read_all(directory) == _expected_prefix(entries, 2, 5)
    # Nothing destroyed: the damaged tail and the later segments sit in the quarantine.
    tail = (quarantine / f"{segment.name}.from-{offsets[5]}").read_bytes()
    assert segment.read_bytes() + tail == damaged
    for ledger_id in (3, 4):
        name = segment_file_name(ledger_id)
        assert (quarantine / name).read_bytes() == original[name]
    assert b'"droppedEntries": 17' in (quarantine / MANIFEST_NAME).read_bytes()


def test_after_repair_positions_are_not_reused_and_cursors_are_pulled_back(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, _entries = pristine
    segment = directory / segment_file_name(2)
    flip_bit(segment, (_record_offsets(segment)[5] + RECORD_HEADER_SIZE) * 8)
    _repair(directory, tmp_path / "q")

    ledger = _open(directory)
    try:
        late, early = ledger.cursors["late"], ledger.cursors["early"]
        assert late.was_clamped
        assert late.mark_delete_position == Position(2, 4)
        assert late.properties == {}  # the snapshot described entries that are gone
        assert not early.was_clamped
        assert early.mark_delete_position == Position(1, 1)
        assert ledger.properties["pulsar.topic_epoch"] == 3
        assert ledger.append(b"new").ledger_id > 4  # ledger 4 (dropped) is never reused
        ledger.flush()
    finally:
        ledger.close()


def test_a_cut_segment_keeps_the_whole_records_before_the_cut(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    segment = directory / segment_file_name(3)
    offsets = _record_offsets(segment)
    original = segment.read_bytes()
    with segment.open("r+b") as handle:
        handle.truncate(offsets[4] + 3)  # inside the header of entry 3:4

    plan = _repair(directory, tmp_path / "q")

    assert plan.damage is not None
    assert plan.damage.offset == offsets[4]
    assert "cut at" in plan.damage.reason
    assert [(d.ledger_id, d.first_entry, d.entries) for d in plan.dropped] == [(3, 4, 4), (4, 0, 6)]
    assert _read_all(directory) == _expected_prefix(entries, 3, 4)
    tail = (tmp_path / "q" / f"{segment.name}.from-{offsets[4]}").read_bytes()
    assert tail == original[offsets[4] : offsets[4] + 3]


def test_a_damaged_header_drops_the_whole_segment_and_reserves_the_highest_id(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    flip_bit(directory / segment_file_name(4), 9 * 8)  # the header's ledger id

    plan = _repair(directory, tmp_path / "q")

    assert plan.damage is not None
    assert plan.damage.offset == 0
    assert [(d.ledger_id, d.entries) for d in plan.dropped] == [(4, 6)]
    assert plan.placeholder == 4
    assert (tmp_path / "q" / segment_file_name(4)).exists()
    assert _read_all(directory) == _expected_prefix(entries, 4, 0)
    ledger = _open(directory)
    try:
        assert ledger.append(b"x").ledger_id == 5
    finally:
        ledger.close()


def test_a_missing_sealed_segment_is_dropped_with_its_counts_from_the_metadata(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    (directory / segment_file_name(2)).unlink()

    plan = _repair(directory, tmp_path / "q")

    assert plan.damage is not None
    assert "missing" in plan.damage.reason
    assert next((d.ledger_id, d.entries, d.why) for d in plan.dropped) == (2, 8, "file missing")
    assert plan.kept_entries == 8
    assert _read_all(directory) == _expected_prefix(entries, 2, 0)


def test_the_unsealed_segment_of_a_crash_after_the_damage_is_dropped_too(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    ledger = _open(directory)
    for index in range(3):
        ledger.append(f"after-crash-{index}".encode())
    ledger.flush()
    ledger._abandon()  # a crash: ledger 5 stays unsealed, unlisted in ledger.meta
    flip_bit(directory / segment_file_name(1), (HEADER_SIZE + RECORD_HEADER_SIZE) * 8)

    plan = _repair(directory, tmp_path / "q")

    assert plan.dropped[-1].ledger_id == 5
    assert plan.dropped[-1].entries == 3
    assert "unsealed" in plan.dropped[-1].why
    assert plan.placeholder == 5
    assert _read_all(directory) == _expected_prefix(entries, 1, 0) == []
    assert (tmp_path / "q" / segment_file_name(5)).exists()


@pytest.mark.parametrize("trial", range(40))
def test_random_damage_always_repairs_to_the_longest_valid_prefix(
    pristine: tuple[Path, Entries], tmp_path: Path, trial: int
) -> None:
    source, entries = pristine
    rng = random.Random(trial)
    directory = tmp_path / "copy"
    shutil.copytree(source, directory)
    ledger_id = rng.randint(1, 4)
    segment = directory / segment_file_name(ledger_id)
    offsets = _record_offsets(segment)
    size = segment.stat().st_size
    byte = rng.randrange(size)
    if rng.random() < 0.5:
        flip_bit(segment, byte * 8 + rng.randrange(8))
        # The record holding the flipped byte goes, and all after it; the header: everything.
        kept = sum(1 for o in offsets if o <= byte) - 1 if byte >= HEADER_SIZE else 0
    else:
        with segment.open("r+b") as handle:
            handle.truncate(byte)
        # Every record that is still whole stays.
        kept = sum(1 for end in [*offsets[1:], size] if end <= byte)
    with pytest.raises(CorruptLedgerError):
        _open(directory)

    _repair(directory, tmp_path / "q")

    assert _read_all(directory) == _expected_prefix(entries, ledger_id, kept)
    assert not plan_repair(directory).needs_repair


# ----------------------------------------------------------------------------- nothing to cut


def test_an_intact_ledger_needs_no_repair_and_apply_refuses(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, _ = pristine
    plan = plan_repair(directory)
    assert not plan.needs_repair
    assert plan.dropped == ()
    assert plan.blocking == ()
    with pytest.raises(RepairError, match="nothing to repair"):
        apply_repair(plan, tmp_path / "q")
    assert not (tmp_path / "q").exists()


def test_a_wrong_recorded_checksum_over_valid_records_is_corrected_without_dropping(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, entries = pristine
    meta_path = directory / METADATA_FILE_NAME
    meta = decode_metadata(meta_path.read_bytes(), meta_path)
    wrong = dataclasses.replace(meta.ledgers[1], crc=meta.ledgers[1].crc ^ 1)
    ledgers = (meta.ledgers[0], wrong, *meta.ledgers[2:])
    meta_path.write_bytes(encode_metadata(LedgerMetadata(ledgers, meta.properties, None)))
    with pytest.raises(CorruptLedgerError):
        _open(directory)

    plan = _repair(directory, tmp_path / "q")

    assert plan.crc_fixes == (2,)
    assert plan.dropped == ()
    assert plan.damage is None
    assert _read_all(directory) == entries


def test_damaged_metadata_is_reported_and_never_cut(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    directory, _ = pristine
    flip_bit(directory / METADATA_FILE_NAME, 20 * 8)
    before = _snapshot(directory)

    plan = plan_repair(directory)

    assert plan.blocking
    assert plan.blocking[0].path == directory / METADATA_FILE_NAME
    assert "cannot repair" in plan.describe()[0]
    with pytest.raises(RepairError, match="cannot repair"):
        apply_repair(plan, tmp_path / "q")
    assert _snapshot(directory) == before


def test_damaged_cursor_files_are_reported(pristine: tuple[Path, Entries]) -> None:
    directory, _ = pristine
    cursor = next((directory / "cursors").glob("late*"))
    flip_bit(cursor, 20 * 8)  # in the log's first record (a flip in its zeros harms nothing)
    plan = plan_repair(directory)
    assert not plan.needs_repair
    assert [d.path for d in plan.blocking_cursors] == [cursor]
    assert any("damaged cursor file" in line for line in plan.describe())


# ----------------------------------------------------------------------------- crash safety


def _apply_with_crash_at(directory: Path, quarantine: Path, crash_after: int | None) -> int:
    disk = SimulatedDisk(random.Random(crash_after), crash_after=crash_after)
    try:
        apply_repair(plan_repair(directory), quarantine, file_layer=disk)
    except SimulatedCrash:
        pass
    return disk.calls


def test_a_crash_at_any_step_leaves_a_refused_or_repaired_ledger_and_a_rerun_finishes(
    pristine: tuple[Path, Entries], tmp_path: Path
) -> None:
    source, entries = pristine
    segment = source / segment_file_name(2)
    flip_bit(segment, (_record_offsets(segment)[5] + RECORD_HEADER_SIZE) * 8)
    expected = _expected_prefix(entries, 2, 5)
    total = _apply_with_crash_at(shutil.copytree(source, tmp_path / "count"), tmp_path / "q", None)
    assert total > 10

    for crash_after in range(1, total + 1):
        directory = shutil.copytree(source, tmp_path / f"crash{crash_after}")
        _apply_with_crash_at(directory, tmp_path / f"q{crash_after}", crash_after)
        try:
            stored = _read_all(directory)
        except CorruptLedgerError:
            _repair(directory, tmp_path / f"q{crash_after}-again")  # the rerun finishes the job
            stored = _read_all(directory)
        assert stored == expected, f"crash after call {crash_after}"


# ----------------------------------------------------------------------------- the lock


def test_the_ledger_lock_has_one_holder_at_a_time(tmp_path: Path) -> None:
    first = LedgerLock.try_acquire(tmp_path)
    assert first is not None
    assert LedgerLock.try_acquire(tmp_path) is None
    first.release()
    first.release()  # idempotent
    second = LedgerLock.try_acquire(tmp_path)
    assert second is not None
    assert second.held
    second.release()
