"""Recovery: the pure scan, and the truncation / torn-tail matrix on a real active segment."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage import CorruptLedgerError, Ledger, LedgerConfig, Position, scan_valid_prefix
from broker.storage.position import BEFORE_EVERYTHING
from broker.storage.recovery import (
    OWN_BUFFER_BYTES,
    RECORD_HEADER_SIZE,
    encode_record_parts,
    encode_records,
    py_encode_record_parts,
    record_header,
)
from broker.storage.segment import HEADER_SIZE
from protocol import _speedups
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer, flip_bit

# ---------------------------------------------------------------- pure scan


def test_scan_of_empty_and_zero_filled_buffers_is_empty() -> None:
    empty = scan_valid_prefix(b"")
    assert (empty.valid_bytes, list(empty.offsets)) == (0, [])
    assert scan_valid_prefix(bytes(4096)).valid_bytes == 0


def test_scan_accepts_empty_entries_and_stops_at_zero_fill() -> None:
    records, offsets = encode_records([b"", b"abc", b""])
    result = scan_valid_prefix(records + bytes(100))
    assert result.valid_bytes == len(records)
    assert list(result.offsets) == offsets


def test_scan_base_shifts_offsets_only() -> None:
    records, offsets = encode_records([b"x", b"yz"])
    result = scan_valid_prefix(records, base=1000)
    assert result.valid_bytes == len(records)
    assert list(result.offsets) == [1000 + o for o in offsets]


@pytest.mark.parametrize("byte_index", range(RECORD_HEADER_SIZE + 5))
def test_scan_rejects_any_flipped_byte_of_a_record(byte_index: int) -> None:
    good, _ = encode_records([b"first"])
    damaged = bytearray(good + record_header(b"hello") + b"hello")
    damaged[len(good) + byte_index] ^= 0x40
    assert scan_valid_prefix(bytes(damaged)).valid_bytes == len(good)


def test_scan_rejects_a_length_pointing_past_the_buffer() -> None:
    header = record_header(b"abc")
    huge = (1 << 31).to_bytes(4, "little") + header[4:]
    assert scan_valid_prefix(huge + b"abc").valid_bytes == 0


def test_crc_covers_the_length_field() -> None:
    # Same payload bytes, different claimed length: the stored crc must not validate it.
    header = record_header(b"abcd")
    shorter = (3).to_bytes(4, "little") + header[4:]
    assert scan_valid_prefix(shorter + b"abcd").valid_bytes == 0


entry_lists = st.lists(
    st.one_of(
        st.binary(max_size=64),
        st.sampled_from([b"", b"o" * (OWN_BUFFER_BYTES - 1), bytes(OWN_BUFFER_BYTES)]),
        st.sampled_from([bytes(70_000), b"x" * 200_000]),
    ),
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(entries=entry_lists, running=st.integers(0, (1 << 32) - 1))
def test_compiled_record_parts_match_the_reference(entries: list[bytes], running: int) -> None:
    assert _speedups.RECORD_OWN_BUFFER_BYTES == OWN_BUFFER_BYTES
    assert _speedups.encode_record_parts(entries, running) == py_encode_record_parts(
        entries, running
    )


@settings(max_examples=80, deadline=None)
@given(entries=entry_lists, running=st.integers(0, (1 << 32) - 1))
def test_record_parts_are_the_records_and_carry_the_running_crc(
    entries: list[bytes], running: int
) -> None:
    parts, offsets, size, crc = encode_record_parts(entries, running)
    joined = b"".join(parts)
    assert joined == b"".join(record_header(entry) + entry for entry in entries)
    assert size == len(joined)
    assert crc == crc32c.crc32c(joined, running)
    scan = scan_valid_prefix(joined)
    assert (scan.valid_bytes, list(scan.offsets)) == (size, offsets)
    # Large entries are written from their own buffer, small ones copied into runs between.
    large = [entry for entry in entries if len(entry) >= OWN_BUFFER_BYTES]
    assert [part for part in parts if any(part is entry for entry in large)] == large
    assert len(parts) <= 2 * len(large) + 1


@settings(max_examples=150, deadline=None)
@given(
    entries=entry_lists,
    running=st.integers(0, (1 << 32) - 1),
    known=st.lists(st.booleans(), min_size=20, max_size=20),
)
def test_known_entry_crcs_give_the_same_records(
    entries: list[bytes], running: int, known: list[bool]
) -> None:
    """The flush takes a large entry's record CRCs from its verified checksum (CRC-32C
    combination) instead of reading it: the records are byte for byte the reference's."""
    crcs = [crc32c.crc32c(e) if k else -1 for e, k in zip(entries, known, strict=False)]
    assert encode_record_parts(entries, running, crcs) == py_encode_record_parts(entries, running)


def test_a_known_crc_is_used_not_recomputed() -> None:
    """What makes the combination worth it: a large entry's bytes are not read again, so a
    wrong CRC handed in shows in its record (refused on read, never served). Small entries
    are always read (a pass is cheaper than the combination there)."""
    large, small = b"L" * 70_000, b"s" * 100
    parts, _, _, _ = _speedups.encode_record_parts([small, large], 0, [1, 2])
    joined = b"".join(parts)
    scan = scan_valid_prefix(joined)
    assert scan.valid_bytes == RECORD_HEADER_SIZE + len(small)  # the small one is right
    assert list(scan.offsets) == [0]
    with pytest.raises(ValueError, match="2 entry CRCs for 1 entries"):
        _speedups.encode_record_parts([small], 0, [1, 2])


@settings(max_examples=300, deadline=None)
@given(a=st.binary(max_size=64), b=st.binary(max_size=9000))
def test_crc32c_combination_matches_the_package(a: bytes, b: bytes) -> None:
    combined = _speedups.crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b))
    assert combined == crc32c.crc32c(a + b)


def test_compiled_record_parts_take_any_buffer_through_the_reference() -> None:
    entries: list[bytes] = [bytearray(b"ab"), b"c", memoryview(b"def")]  # type: ignore[list-item]
    expected = py_encode_record_parts([b"ab", b"c", b"def"], 7)
    assert _speedups.encode_record_parts(entries, 7) == expected


# ---------------------------------------------------------------- matrix on real segments

CONFIG = LedgerConfig(max_entries_per_ledger=100_000, preallocate_bytes=4096)


def _build_active_segment(directory: Path, entries: list[bytes]) -> Path:
    """A ledger whose only segment is active (unsealed), as after a crash."""
    ledger = Ledger.open(directory, CONFIG, file_layer=NoSyncLayer(), preallocator=InlineExecutor())
    for entry in entries:
        ledger.append(entry)
    ledger.flush()
    (path,) = ledger.segment_paths()
    ledger._abandon()
    return path


def _record_ends(entries: list[bytes]) -> list[int]:
    ends, position = [], HEADER_SIZE
    for entry in entries:
        position += RECORD_HEADER_SIZE + len(entry)
        ends.append(position)
    return ends


def _reopen_and_read(directory: Path) -> list[tuple[Position, bytes]]:
    ledger = Ledger.open(directory, CONFIG, file_layer=NoSyncLayer(), preallocator=InlineExecutor())
    try:
        return list(ledger.iter_entries(BEFORE_EVERYTHING))
    finally:
        ledger.close()


def _expect_prefix(
    directory: Path, entries: list[bytes], ends: list[int], valid_until: int
) -> None:
    """Reopen must yield exactly the records that end at or before ``valid_until``."""
    kept = [entry for entry, end in zip(entries, ends, strict=True) if end <= valid_until]
    got = _reopen_and_read(directory)
    assert [data for _, data in got] == kept
    assert [p for p, _ in got] == [Position(1, i) for i in range(len(kept))]


def _trial_copy(pristine: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    trial = tmp_path / name
    shutil.copytree(pristine, trial)
    return trial, trial / Path(next(p for p in (pristine.iterdir()) if p.suffix == ".seg")).name


@pytest.fixture
def small_log(tmp_path: Path) -> tuple[Path, list[bytes]]:
    rng = random.Random(7)
    entries = [rng.randbytes(rng.randint(0, 40)) + b"\xff" for _ in range(12)]
    pristine = tmp_path / "pristine"
    _build_active_segment(pristine, entries)
    return pristine, entries


def test_truncating_anywhere_in_the_last_three_records_keeps_the_valid_prefix(
    small_log: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    pristine, entries = small_log
    ends = _record_ends(entries)
    start = ends[-4]  # the first byte of the third-to-last record
    for cut in range(start, ends[-1] + 1):
        trial, segment = _trial_copy(pristine, tmp_path, f"cut{cut}")
        with open(segment, "r+b") as handle:
            handle.truncate(cut)
        _expect_prefix(trial, entries, ends, cut)


def test_truncating_inside_the_segment_header_loses_everything(
    small_log: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    pristine, _entries = small_log
    for cut in (0, 1, HEADER_SIZE - 1):
        trial, segment = _trial_copy(pristine, tmp_path, f"head{cut}")
        with open(segment, "r+b") as handle:
            handle.truncate(cut)
        assert _reopen_and_read(trial) == []


@pytest.mark.parametrize("byte_index", [0, 5, 9, HEADER_SIZE - 1])
def test_a_damaged_header_before_durable_records_is_corruption_not_an_empty_segment(
    small_log: tuple[Path, list[bytes]], tmp_path: Path, byte_index: int
) -> None:
    """A flushed active segment whose header is hit afterwards (a bit flip after the crash) must
    not be taken for a segment that never held data: that would drop acknowledged entries."""
    pristine, _entries = small_log
    trial, segment = _trial_copy(pristine, tmp_path, f"flip{byte_index}")
    flip_bit(segment, byte_index * 8)
    with pytest.raises(CorruptLedgerError) as caught:
        _reopen_and_read(trial)
    assert caught.value.path == segment
    assert caught.value.offset == 0
    assert "12 valid records follow" in caught.value.reason
    assert segment.stat().st_size > HEADER_SIZE  # nothing was cut


def test_a_torn_header_with_nothing_behind_it_is_an_empty_segment(tmp_path: Path) -> None:
    """The header is synced by the first flush: damaged with no record behind it, the segment
    never held durable data (a crash during its first flush)."""
    directory = tmp_path / "torn"
    (segment,) = [_build_active_segment(directory, [b"only"])]
    with open(segment, "r+b") as handle:
        handle.seek(3)
        handle.write(b"\x00" * (HEADER_SIZE - 3 + RECORD_HEADER_SIZE + 4))
    assert _reopen_and_read(directory) == []


@pytest.mark.parametrize("fill", ["zeros", "random"])
def test_overwriting_the_tail_keeps_records_before_the_first_changed_byte(
    small_log: tuple[Path, list[bytes]], tmp_path: Path, fill: str
) -> None:
    pristine, entries = small_log
    ends = _record_ends(entries)
    data_end = ends[-1]
    rng = random.Random(fill)
    original = (next(p for p in pristine.iterdir() if p.suffix == ".seg")).read_bytes()
    for length in [1, 2, 7, 8, 9, 30, 100, 200, data_end - HEADER_SIZE]:
        begin = data_end - length
        trial, segment = _trial_copy(pristine, tmp_path, f"{fill}{length}")
        junk = bytes(length + 50) if fill == "zeros" else rng.randbytes(length + 50)
        with open(segment, "r+b") as handle:
            handle.seek(begin)
            handle.write(junk)
        changed = next(
            (i for i in range(begin, begin + len(junk)) if original[i] != junk[i - begin]),
            data_end,
        )
        _expect_prefix(trial, entries, ends, changed)


def test_random_truncations_of_a_large_segment(tmp_path: Path) -> None:
    rng = random.Random(2024)
    entries = [rng.randbytes(rng.randint(0, 1000)) for _ in range(1500)]
    pristine = tmp_path / "pristine"
    _build_active_segment(pristine, entries)
    ends = _record_ends(entries)
    for trial_number in range(200):
        cut = rng.randint(HEADER_SIZE, ends[-1])
        trial, segment = _trial_copy(pristine, tmp_path, f"t{trial_number}")
        with open(segment, "r+b") as handle:
            handle.truncate(cut)
        _expect_prefix(trial, entries, ends, cut)
        shutil.rmtree(trial)


def test_recovery_removes_the_zero_tail_and_seals_durably(
    small_log: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    pristine, entries = small_log
    segment = next(p for p in pristine.iterdir() if p.suffix == ".seg")
    assert segment.stat().st_size == CONFIG.preallocate_bytes  # pre-allocated, zero tail
    ledger = Ledger.open(pristine, CONFIG, file_layer=NoSyncLayer())
    assert segment.stat().st_size == _record_ends(entries)[-1]
    assert ledger.last_confirmed_position == Position(1, len(entries) - 1)
    # A fresh ledger id is used for new appends; the recovered one is sealed.
    assert ledger.append(b"new") == Position(2, 0)
    ledger.close()
    reopened = Ledger.open(pristine, CONFIG, file_layer=NoSyncLayer())
    assert [d for _, d in reopened.iter_entries(BEFORE_EVERYTHING)] == [*entries, b"new"]
    reopened.close()
