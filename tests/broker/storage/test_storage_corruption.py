"""Bit flips: in sealed segments (refuse to open, naming file and offset), in the ledger
metadata (properties, sealed list) and in cursor files: always detected, never served. A
cursor log's last record is the one exception: damage there cannot be told from an append a
crash cut short, so the state before it is used (``broker.storage.cursor_file``)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from broker.storage import CorruptCursorError, CorruptLedgerError, Ledger, LedgerConfig, Position
from broker.storage.cursor_file import LOG_HEADER, decode_cursor_state, next_record_offset
from broker.storage.files import read_file
from broker.storage.recovery import RECORD_HEADER_SIZE
from broker.storage.segment import HEADER_SIZE
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer, flip_bit
from tests.broker.storage.legacy_formats import checked_cursor_file

CONFIG = LedgerConfig(max_entries_per_ledger=8, preallocate_bytes=2048)


def _open(directory: Path, config: LedgerConfig = CONFIG) -> Ledger:
    return Ledger.open(directory, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())


@pytest.fixture
def pristine(tmp_path: Path) -> tuple[Path, dict[Path, list[int]]]:
    """A closed ledger with 4 sealed segments, a cursor and properties; record starts by file."""
    rng = random.Random(99)
    directory = tmp_path / "pristine"
    ledger = _open(directory)
    for _ in range(30):
        ledger.append(rng.randbytes(rng.randint(1, 60)))
    ledger.flush()
    cursor = ledger.open_cursor("sub", InitialPosition.Earliest)
    # Three saves after the first file: a pre-filled log of three records, the last at close.
    cursor.mark_delete(Position(1, 0), {"snapshot": 5})
    cursor.persist()
    cursor.delete([Position(1, 3), Position(2, 1)])
    cursor.delete_batch_indexes(Position(1, 5), [0b1100])
    cursor.persist()
    cursor.mark_delete(Position(1, 1), {"snapshot": 7})
    ledger.set_property("topic.epoch", 4)
    starts: dict[Path, list[int]] = {}
    for path in ledger.segment_paths():
        data = path.read_bytes()
        offsets, offset = [], HEADER_SIZE
        while offset < len(data):
            offsets.append(offset)
            offset += RECORD_HEADER_SIZE + int.from_bytes(data[offset : offset + 4], "little")
        starts[path.relative_to(directory)] = offsets
    ledger.close()
    return directory, starts


def _record_start(starts: list[int], byte: int) -> int:
    if byte < HEADER_SIZE:
        return 0
    return max(s for s in starts if s <= byte)


def test_a_bit_flip_in_a_sealed_segment_refuses_to_open_naming_file_and_offset(
    pristine: tuple[Path, dict[Path, list[int]]], tmp_path: Path
) -> None:
    directory, starts = pristine
    rng = random.Random(5)
    for trial in range(80):
        name = rng.choice(sorted(starts))
        copy = tmp_path / f"flip{trial}"
        shutil.copytree(directory, copy)
        size = (copy / name).stat().st_size
        bit = rng.randrange(size * 8)
        flip_bit(copy / name, bit)
        with pytest.raises(CorruptLedgerError) as caught:
            _open(copy)
        assert caught.value.path == copy / name
        assert caught.value.offset == _record_start(starts[name], bit // 8)
        assert str(copy / name) in str(caught.value)
        assert f"offset {caught.value.offset}" in str(caught.value)
        shutil.rmtree(copy)


def test_without_verification_a_flip_is_reported_on_read_and_never_served(
    pristine: tuple[Path, dict[Path, list[int]]],
) -> None:
    directory, starts = pristine
    name = sorted(starts)[1]  # ledger 2
    payload_byte = starts[name][2] + RECORD_HEADER_SIZE  # inside the third record's payload
    flip_bit(directory / name, payload_byte * 8)
    config = LedgerConfig(
        max_entries_per_ledger=8, preallocate_bytes=2048, verify_sealed_on_open=False
    )
    ledger = _open(directory, config)
    assert len(ledger.read(Position(1, 0), 8)) == 8  # ledger 1 is intact
    # The first read of ledger 2 builds its index by a full scan, which finds the damage.
    with pytest.raises(CorruptLedgerError) as caught:
        ledger.read(Position(2, 0), 1)
    assert (caught.value.path, caught.value.offset) == (directory / name, starts[name][2])
    ledger.close()


def test_damage_after_the_index_is_built_is_caught_by_the_per_record_crc(
    pristine: tuple[Path, dict[Path, list[int]]],
) -> None:
    directory, starts = pristine
    name = sorted(starts)[1]
    ledger = _open(directory)
    assert len(ledger.read(Position(2, 0), 8)) == 8  # index loaded, entries not cached
    flip_bit(directory / name, (starts[name][5] + RECORD_HEADER_SIZE) * 8 + 3)
    assert len(ledger.read(Position(2, 0), 5)) == 5  # before the damage
    with pytest.raises(CorruptLedgerError) as caught:
        ledger.read(Position(2, 0), 8)
    assert (caught.value.path, caught.value.offset) == (directory / name, starts[name][5])
    ledger.close()


def test_a_missing_sealed_segment_is_reported(
    pristine: tuple[Path, dict[Path, list[int]]],
) -> None:
    directory, starts = pristine
    (directory / sorted(starts)[1]).unlink()
    with pytest.raises(CorruptLedgerError, match="missing"):
        _open(directory)


def test_a_truncated_sealed_segment_is_corruption_not_a_torn_tail(
    pristine: tuple[Path, dict[Path, list[int]]],
) -> None:
    directory, starts = pristine
    name = sorted(starts)[0]
    with open(directory / name, "r+b") as handle:
        handle.truncate(starts[name][-1])
    with pytest.raises(CorruptLedgerError) as caught:
        _open(directory)
    assert caught.value.path == directory / name


def _every_bit_sample(path: Path, count: int, seed: int) -> list[int]:
    bits = path.stat().st_size * 8
    return random.Random(seed).sample(range(bits), min(count, bits))


def test_bit_flips_in_the_metadata_file_are_detected(
    pristine: tuple[Path, dict[Path, list[int]]], tmp_path: Path
) -> None:
    directory, _ = pristine
    meta = directory / "ledger.meta"
    for bit in _every_bit_sample(meta, 150, seed=1):
        copy = tmp_path / f"meta{bit}"
        shutil.copytree(directory, copy)
        flip_bit(copy / "ledger.meta", bit)
        with pytest.raises(CorruptLedgerError) as caught:
            _open(copy)
        assert caught.value.path == copy / "ledger.meta"
        shutil.rmtree(copy)


def test_bit_flips_in_a_format_1_cursor_file_are_detected(
    pristine: tuple[Path, dict[Path, list[int]]], tmp_path: Path
) -> None:
    """What earlier builds wrote (one checked document): every flip is caught."""
    directory, _ = pristine
    relative = Path("cursors") / "sub.cursor"
    state = decode_cursor_state(read_file(directory / relative), directory / relative)
    (directory / relative).write_bytes(checked_cursor_file(state))
    for bit in _every_bit_sample(directory / relative, 150, seed=2):
        copy = tmp_path / f"cursor{bit}"
        shutil.copytree(directory, copy)
        flip_bit(copy / relative, bit)
        with pytest.raises(CorruptCursorError) as caught:
            _open(copy)
        assert caught.value.path == copy / relative
        shutil.rmtree(copy)


def _cursor_log(directory: Path) -> tuple[Path, list[range]]:
    """The pristine cursor's log: its path and the bytes of each record."""
    path = directory / "cursors" / "sub.cursor"
    data = path.read_bytes()
    records, offset = [], LOG_HEADER.size
    while (length := int.from_bytes(data[offset : offset + 4], "little")) != 0:
        end = offset + RECORD_HEADER_SIZE + length
        records.append(range(offset, end))
        offset = next_record_offset(end)
    return path, records


def test_bit_flips_in_a_cursor_log_are_detected_or_read_as_a_torn_last_append(
    pristine: tuple[Path, dict[Path, list[int]]], tmp_path: Path
) -> None:
    """In the log header or any record but the last: refused. In the last record: what a
    crash during that append leaves, the state before it (never the damaged bytes). In the
    zeros between and past the records: nothing is stored there, the state is intact."""
    directory, _ = pristine
    path, records = _cursor_log(directory)
    assert len(records) == 3  # the fixture's three saves
    rng = random.Random(2)
    header_bits = range(LOG_HEADER.size * 8)
    early_bits = [
        bit for record in records[:-1] for bit in range(record[0] * 8, record[-1] * 8 + 8)
    ]
    last_bits = range(records[-1][0] * 8, records[-1][-1] * 8 + 8)
    zero_bits = range((records[-1][-1] + 1) * 8, path.stat().st_size * 8)
    cases = [(bit, "refused") for bit in rng.sample(header_bits, 20) + rng.sample(early_bits, 60)]
    cases += [(bit, "previous") for bit in rng.sample(last_bits, 40)]
    cases += [(bit, "intact") for bit in rng.sample(zero_bits, 30)]
    for bit, expected in cases:
        copy = tmp_path / f"log{bit}"
        shutil.copytree(directory, copy)
        flip_bit(copy / path.relative_to(directory), bit)
        if expected == "refused":
            with pytest.raises(CorruptCursorError) as caught:
                _open(copy)
            assert caught.value.path == copy / path.relative_to(directory)
        else:
            ledger = _open(copy)
            cursor = ledger.cursors["sub"]
            wanted = Position(1, 0) if expected == "previous" else Position(1, 1)
            assert (bit, cursor.mark_delete_position) == (bit, wanted)
            ledger.close()
        shutil.rmtree(copy)


def test_undamaged_copy_opens_with_everything_restored(
    pristine: tuple[Path, dict[Path, list[int]]],
) -> None:
    directory, _ = pristine
    ledger = _open(directory)
    cursor = ledger.cursors["sub"]
    assert ledger.properties == {"topic.epoch": 4}
    assert cursor.properties == {"snapshot": 7}
    assert cursor.mark_delete_position == Position(1, 1)
    assert cursor.individually_deleted() == [
        (Position(1, 3), Position(1, 3)),
        (Position(2, 1), Position(2, 1)),
    ]
    assert cursor.batch_ack_set(Position(1, 5)) == [0b1100]
    ledger.close()
