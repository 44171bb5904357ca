"""broker.storage.cursor_store: saves append to a pre-filled cursor log and roll only when it
is full; what a crash, a failed write or a replaced file leaves is always a state that was
saved; a folder an earlier build wrote (format-1 cursor files) opens and is rolled over."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from broker.storage import CorruptCursorError, Ledger, LedgerConfig, Position
from broker.storage.cursor_file import (
    CURSOR_LOG_MAGIC,
    CURSOR_MAGIC,
    CursorState,
    decode_cursor_state,
)
from broker.storage.cursor_store import (
    MAX_LOG_BYTES,
    MAX_PADDED_RECORD,
    SLOTS_PER_LOG,
    CursorStore,
    capacity_for,
)
from broker.storage.files import atomic_write, read_file
from protocol.enums import InitialPosition
from tests.broker.storage.faults import (
    FaultyLayer,
    InlineExecutor,
    NoSyncLayer,
    SimulatedCrash,
    SimulatedDisk,
)
from tests.broker.storage.legacy_formats import checked_cursor_file


def _store(directory: Path, layer: NoSyncLayer | SimulatedDisk | None = None) -> CursorStore:
    (directory / "cursors").mkdir(parents=True, exist_ok=True)
    return CursorStore(layer or NoSyncLayer(), directory, max_ranges=100, max_batch=100)


def _state(entry: int, name: str = "sub", **properties: int) -> CursorState:
    return CursorState(name, Position(1, entry), properties=dict(properties))


def _load(store: CursorStore, name: str = "sub") -> CursorState:
    path = store.path_of(name)
    return decode_cursor_state(read_file(path), path)


def _replaces(layer: FaultyLayer) -> int:
    return sum(1 for operation, _ in layer.calls if operation == "replace")


def test_the_first_file_is_exact_and_later_saves_append_without_a_rename(tmp_path: Path) -> None:
    layer = FaultyLayer()
    store = _store(tmp_path, layer)
    store.save(_state(0))
    first = store.path_of("sub").read_bytes()
    assert first[:4] == CURSOR_LOG_MAGIC
    assert first[-1:] != b"\0"
    store.save(_state(1))  # the second save rolls into a pre-filled log
    size = store.path_of("sub").stat().st_size
    assert size == capacity_for(len(first) - 8)
    assert _replaces(layer) == 2
    for entry in range(2, 40):
        store.save(_state(entry, snapshot=entry))
        assert _load(store) == _state(entry, snapshot=entry)
    assert _replaces(layer) == 2  # 38 saves: appends only, no rename, no size change
    assert store.path_of("sub").stat().st_size == size
    syncs = [name for operation, name in layer.calls if operation == "fdatasync"]
    assert len(syncs) == 38
    assert all(name.endswith("sub.cursor") for name in syncs)


def test_a_full_log_rolls_and_the_state_is_always_the_last_save(tmp_path: Path) -> None:
    layer = FaultyLayer()
    store = _store(tmp_path, layer)
    saves = 3 * SLOTS_PER_LOG
    for entry in range(saves):
        store.save(_state(entry))
        assert _load(store).mark_delete == Position(1, entry)
    # One exact file, then a pre-filled log per SLOTS_PER_LOG records or so.
    assert 3 <= _replaces(layer) <= 2 + saves // (SLOTS_PER_LOG - 1)


def test_a_large_record_rolls_on_every_save_without_pre_filling(tmp_path: Path) -> None:
    layer = FaultyLayer()
    store = _store(tmp_path, layer)
    many = {f"p{i:06d}": i for i in range(MAX_PADDED_RECORD // 10)}
    for entry in range(3):
        store.save(CursorState("sub", Position(1, entry), properties=many))
        data = store.path_of("sub").read_bytes()
        assert not data.endswith(b"\0\0\0\0")
    assert _replaces(layer) == 3
    assert _load(store).properties == many


def test_capacity_is_bounded_and_always_holds_two_records() -> None:
    assert capacity_for(100) == 32 * 1024  # 64 slots of 512 bytes
    assert capacity_for(MAX_PADDED_RECORD) <= MAX_LOG_BYTES + 2 * MAX_PADDED_RECORD
    for record in (1, 511, 512, 513, 4000, MAX_PADDED_RECORD):
        capacity = capacity_for(record)
        assert capacity % 4096 == 0
        assert capacity >= 8 + 2 * 512 * -(-record // 512)


def test_a_file_replaced_or_deleted_behind_the_store_is_rolled_not_appended_to(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    store.save(_state(0))
    store.save(_state(1))
    for entry in range(2, 6):
        store.save(_state(entry))
    path = store.path_of("sub")
    other = _store(tmp_path / "other")
    other.save(_state(9))  # a first file: exact, one record
    os.replace(other.path_of("sub"), path)  # e.g. a repair put it there
    store.save(_state(2))
    assert _load(store).mark_delete == Position(1, 2)
    path.unlink()
    store.save(_state(3))
    assert _load(store).mark_delete == Position(1, 3)


@pytest.mark.parametrize("operation", ["pwrite", "fdatasync"])
def test_a_failed_append_is_reported_and_the_next_save_rolls(
    tmp_path: Path, operation: str
) -> None:
    layer = FaultyLayer()
    store = _store(tmp_path, layer)
    store.save(_state(0))
    store.save(_state(1))
    store.save(_state(2))
    layer.fail(operation, errno.EIO, suffix="sub.cursor")
    with pytest.raises(OSError):
        store.save(_state(3))
    before = _replaces(layer)
    store.save(_state(4))
    assert _replaces(layer) == before + 1
    assert _load(store).mark_delete == Position(1, 4)


@pytest.mark.parametrize("seed", range(40))
def test_a_crash_at_any_call_leaves_a_state_that_was_saved(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "t"
    _store(directory).save(_state(0))  # the cursor exists before the crashing run
    disk = SimulatedDisk(rng, crash_after=rng.randint(1, 60))
    store = _store(directory, disk)
    finished = 0
    try:
        for entry in range(1, 30):
            store.save(_state(entry))
            finished = entry
    except SimulatedCrash:
        pass
    state = _load(_store(directory))
    # The last save that returned, or the one the crash interrupted.
    assert state.mark_delete in (Position(1, finished), Position(1, finished + 1))


def test_a_damaged_record_before_valid_ones_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for entry in range(4):
        store.save(_state(entry))
    path = store.path_of("sub")
    data = bytearray(path.read_bytes())
    data[512 + 20] ^= 0x01  # inside the second record of the log; two valid ones follow
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCursorError, match="before a valid one"):
        _load(store)


def _ledger(directory: Path) -> Ledger:
    return Ledger.open(
        directory,
        LedgerConfig(max_entries_per_ledger=4, preallocate_bytes=0),
        file_layer=NoSyncLayer(),
        preallocator=InlineExecutor(),
    )


def test_a_folder_with_format_1_cursor_files_opens_and_rolls_them_over(tmp_path: Path) -> None:
    """Issue #22's upgrade rule: what the builds before the cursor log wrote opens unchanged;
    the first save writes the new format, and every later open reads it."""
    directory = tmp_path / "t"
    ledger = _ledger(directory)
    for index in range(10):
        ledger.append(b"e%d" % index)
    ledger.flush()
    cursor = ledger.open_cursor("sub", InitialPosition.Earliest)
    cursor.delete([Position(1, 2), Position(2, 1)])
    cursor.mark_delete(Position(1, 0), {"pulsar.dedup.p": 41})
    ledger.close()
    path = directory / "cursors" / "sub.cursor"
    state = decode_cursor_state(read_file(path), path)
    atomic_write(NoSyncLayer(), path, checked_cursor_file(state))  # as the earlier build wrote
    assert path.read_bytes()[:4] == CURSOR_MAGIC

    ledger = _ledger(directory)
    cursor = ledger.cursors["sub"]
    assert cursor.mark_delete_position == Position(1, 0)
    assert cursor.properties == {"pulsar.dedup.p": 41}
    assert cursor.individually_deleted() == [
        (Position(1, 2), Position(1, 2)),
        (Position(2, 1), Position(2, 1)),
    ]
    cursor.mark_delete(Position(1, 1), {"pulsar.dedup.p": 42})
    cursor.persist()
    assert path.read_bytes()[:4] == CURSOR_LOG_MAGIC
    ledger.close()
    ledger = _ledger(directory)
    assert ledger.cursors["sub"].mark_delete_position == Position(1, 2)  # (1, 2) was deleted
    assert ledger.cursors["sub"].properties == {"pulsar.dedup.p": 42}
    ledger.close()


def test_a_cursor_deleted_and_made_again_starts_a_new_file(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    ledger = _ledger(directory)
    ledger.append(b"e")
    ledger.flush()
    for _ in range(3):
        cursor = ledger.open_cursor("sub", InitialPosition.Earliest)
        for _ in range(3):
            cursor.mark_delete(Position(1, 0), {"n": 1})
            cursor.persist()
        ledger.delete_cursor("sub")
        assert not (directory / "cursors" / "sub.cursor").exists()
    ledger.open_cursor("sub", InitialPosition.Earliest)
    ledger.close()
    ledger = _ledger(directory)
    assert ledger.cursors["sub"].mark_delete_position == Position(1, -1)
    ledger.close()
