"""broker.storage.cursor_names: cursor names to files, and the upgrade of format-1 folders.

Names that met in one file before (a long name's hash spelled as a short name; names differing
only in case on a case-insensitive volume) get files of their own, on a real ledger; a folder
written in format 1 opens with every cursor and its state, also after a crash at any step of the
upgrade.
"""

from __future__ import annotations

import string
from hashlib import sha256
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.storage import CorruptCursorError, Ledger, LedgerConfig, Position
from broker.storage.cursor_file import CursorState
from broker.storage.cursor_names import (
    CURSOR_SUFFIX,
    FORMAT_MARKER,
    cursor_file_stem,
    legacy_cursor_file_stem,
)
from broker.storage.files import FileLayer, atomic_write
from broker.storage.ranges import EntryRange
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer
from tests.broker.storage.legacy_formats import checked_cursor_file

CONFIG = LedgerConfig(max_entries_per_ledger=4, preallocate_bytes=0)
LONG = "x" * 300
# What format 1 hashed LONG to: a name a client may also choose for a subscription.
LONG_HASH_NAME = "h-" + sha256(LONG.encode()).hexdigest()
_STEM_CHARS = frozenset(string.ascii_lowercase + string.digits + "._-%~" + "ABCDEF")

names = st.text(st.characters(codec=None, exclude_categories=()), min_size=1, max_size=90)
tricky = st.text(st.sampled_from(list("aAbB~%2F-h.é\u212a")), min_size=1, max_size=8)


def _open(directory: Path, layer: FileLayer | None = None) -> Ledger:
    return Ledger.open(
        directory, CONFIG, file_layer=layer or NoSyncLayer(), preallocator=InlineExecutor()
    )


def _ledger_with_entries(directory: Path, count: int) -> list[Position]:
    ledger = _open(directory)
    positions = [ledger.append(b"e%d" % i) for i in range(count)]
    ledger.flush()
    ledger.close()
    return positions


# ---------------------------------------------------------------------------- the mapping


@given(st.lists(st.one_of(names, tricky), min_size=2, max_size=20, unique=True))
def test_distinct_names_get_distinct_files_even_ignoring_case(given_names: list[str]) -> None:
    stems = [cursor_file_stem(name) for name in given_names]
    assert len({stem.lower() for stem in stems}) == len(given_names)


@given(st.one_of(names, tricky, st.text(min_size=150, max_size=400)))
def test_a_stem_is_a_short_plain_file_name(name: str) -> None:
    stem = cursor_file_stem(name)
    assert set(stem) <= _STEM_CHARS
    assert len((stem + CURSOR_SUFFIX).encode()) <= 255


def test_no_name_spells_the_file_of_a_hashed_one() -> None:
    hashed = cursor_file_stem(LONG)
    assert hashed.startswith("~")
    assert cursor_file_stem(hashed) != hashed  # "~" is escaped when it is spelled
    assert cursor_file_stem(LONG_HASH_NAME) != hashed


def test_the_legacy_reader_spells_names_as_format_1_did() -> None:
    """Pinned by hand: the upgrade finds format-1 files by this function."""
    assert legacy_cursor_file_stem("Sub") == "Sub"
    assert legacy_cursor_file_stem("a/b c") == "a%2Fb%20c"
    assert legacy_cursor_file_stem("~x.y_z-") == "~x.y_z-"
    assert legacy_cursor_file_stem("é") == "%C3%A9"
    assert legacy_cursor_file_stem(LONG) == LONG_HASH_NAME


def test_names_that_shared_a_file_keep_their_own_state(tmp_path: Path) -> None:
    p = _ledger_with_entries(tmp_path / "t", 6)
    ledger = _open(tmp_path / "t")
    marks = {LONG: p[1], LONG_HASH_NAME: p[3], "Sub": p[2], "sub": p[4], "SUB": p[0]}
    for name, position in marks.items():
        ledger.open_cursor(name, InitialPosition.Earliest).mark_delete(position)
    ledger.close()
    files = [path.name.lower() for path in (tmp_path / "t" / "cursors").glob("*.cursor")]
    assert len(set(files)) == len(marks)  # apart on a case-insensitive volume too
    reopened = _open(tmp_path / "t")
    assert {n: c.mark_delete_position for n, c in reopened.cursors.items()} == marks
    reopened.close()


# ---------------------------------------------------------------------------- upgrade


def _format_1_folder(directory: Path) -> dict[str, CursorState]:
    """A topic folder as the builds before format 2 left it: cursor files under format-1
    names (written as those builds wrote them: atomically, encoded by ``cursor_file``), no
    marker."""
    p = _ledger_with_entries(directory, 8)
    states = {
        "Sub": CursorState("Sub", p[2], properties={"k": 7}),
        LONG: CursorState(LONG, p[1], ranges=[EntryRange(p[3].ledger_id, 0, 0)]),
        "A/b c": CursorState("A/b c", p[0], batch={p[5]: [6]}),
        "~tilde": CursorState("~tilde", p[6]),
        "plain.sub_1-x": CursorState("plain.sub_1-x", p[4]),
        "pulsar.dedup": CursorState("pulsar.dedup", p[7], properties={"producer-1": 41}),
    }
    folder = directory / "cursors"
    (folder / FORMAT_MARKER).unlink()
    for name, state in states.items():
        path = folder / (legacy_cursor_file_stem(name) + CURSOR_SUFFIX)
        atomic_write(NoSyncLayer(), path, checked_cursor_file(state))
    return states


def _assert_intact(directory: Path, states: dict[str, CursorState]) -> None:
    ledger = _open(directory)
    try:
        assert sorted(ledger.cursors) == sorted(states)
        for name, state in states.items():
            snapshot = ledger.cursors[name].snapshot()
            assert (snapshot.mark_delete, snapshot.properties) == (
                state.mark_delete,
                state.properties,
            )
            assert (snapshot.ranges, snapshot.batch) == (state.ranges, state.batch)
    finally:
        ledger.close()
    folder = directory / "cursors"
    assert (folder / FORMAT_MARKER).exists()
    expected = sorted(cursor_file_stem(name) + CURSOR_SUFFIX for name in states)
    assert sorted(path.name for path in folder.glob("*" + CURSOR_SUFFIX)) == expected


def test_a_format_1_folder_opens_with_every_cursor(tmp_path: Path) -> None:
    states = _format_1_folder(tmp_path / "t")
    _assert_intact(tmp_path / "t", states)
    _assert_intact(tmp_path / "t", states)  # and again, in format 2 now


class _Crash(BaseException):
    """The process dies (a BaseException: nothing under test may swallow it)."""


class _CrashAt(NoSyncLayer):
    """Dies at the ``at``-th rename into a cursor folder (the upgrade's, then the marker's)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.renames = 0

    def replace(self, src: Path, dst: Path) -> None:
        if dst.parent.name == "cursors":
            self.renames += 1
            if self.renames == self.at:
                raise _Crash
        super().replace(src, dst)


def test_an_upgrade_interrupted_at_any_step_is_finished_by_the_next_open(
    tmp_path: Path,
) -> None:
    # Four of the six names are spelled differently by format 2: four renames, then the
    # marker's; crash at each, then open normally.
    for at in range(1, 6):
        directory = tmp_path / f"t{at}"
        states = _format_1_folder(directory)
        layer = _CrashAt(at)
        with pytest.raises(_Crash):
            _open(directory, layer)
        assert not (directory / "cursors" / FORMAT_MARKER).exists()
        _assert_intact(directory, states)
    finished = _CrashAt(0)
    _open(tmp_path / "t5", finished).close()
    assert finished.renames == 0  # nothing left to rename; cursor files were clean


def test_a_damaged_file_stops_the_upgrade_until_it_is_repaired(tmp_path: Path) -> None:
    states = _format_1_folder(tmp_path / "t")
    damaged = tmp_path / "t" / "cursors" / "Sub.cursor"
    damaged.write_bytes(damaged.read_bytes()[:-3])
    with pytest.raises(CorruptCursorError) as raised:
        _open(tmp_path / "t")
    assert raised.value.path == damaged
    damaged.unlink()  # what repairing the topic does with a damaged cursor file
    del states["Sub"]
    _assert_intact(tmp_path / "t", states)


def test_a_file_named_for_another_cursor_is_refused_in_either_format(tmp_path: Path) -> None:
    states = _format_1_folder(tmp_path / "t")
    folder = tmp_path / "t" / "cursors"
    (folder / "Sub.cursor").rename(folder / "Other.cursor")
    with pytest.raises(CorruptCursorError, match="holds cursor 'Sub'"):
        _open(tmp_path / "t")
    (folder / "Other.cursor").rename(folder / "Sub.cursor")
    _assert_intact(tmp_path / "t", states)
    (folder / "%53ub.cursor").rename(folder / "Sub.cursor")  # format 1's name, in format 2
    with pytest.raises(CorruptCursorError, match="holds cursor 'Sub'"):
        _open(tmp_path / "t")
