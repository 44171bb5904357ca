"""The group commit's loops (`broker.publish.settle`): each compiled one against its reference on
the same groups (entries, positions, PIP-6 marks; latency tally, done flags and futures), the
compiled `Publication` against `PyPublication`, and a real topic whose keyed and keyless entries
are settled through them (the keys themselves: `KeyGate.persist_group`, test_idempotency_gate)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.publish.producers import Producer
from broker.publish.publication import PyPublication
from broker.publish.settle import (
    py_group_entries,
    py_move_dedup_marks,
    py_place_group,
    py_settle_durable,
)
from broker.storage import Position
from broker.storage.buckets import LATENCY_MS_BOUNDS, Buckets
from protocol import _speedups
from tests.broker.publish.test_idempotency_topic import config, open_topic, single
from tests.broker.topics.test_topic_dedup import connect

# One publication: its age in ms when the group is durable, and whether a caller awaits a
# future.
writes = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from([0.0, *LATENCY_MS_BOUNDS, 1e9]),
            st.floats(0, 5000, allow_nan=False),
        ),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


@dataclass
class _Side:
    """One side of the comparison: its group and the futures of its awaited publications."""

    group: list[Any]
    futures: list[asyncio.Future[Position | None] | None]


def _side(spec: list[tuple[float, bool]], loop: Any, kind: type[Any] = PyPublication) -> _Side:
    group: list[Any] = []
    futures: list[asyncio.Future[Position | None] | None] = []
    for number, (age_ms, awaited) in enumerate(spec):
        future: asyncio.Future[Position | None] | None = loop.create_future() if awaited else None
        write = kind(cast(Producer, None), number, b"", -1, 100.0 - age_ms / 1000, None, future)
        write.position = Position(3, number)
        group.append(write)
        futures.append(future)
    return _Side(group, futures)


def _settle(side: _Side, compiled: bool) -> tuple[list[int], float]:
    settle = _speedups.settle_durable if compiled else py_settle_durable
    result: tuple[list[int], float] = settle(side.group, 100.0, LATENCY_MS_BOUNDS)
    return result


def _state(side: _Side) -> tuple[object, ...]:
    return (
        [w.done for w in side.group if w.future is None],
        [f.result() for f in side.futures if f is not None],
    )


@settings(max_examples=300, deadline=None)
@given(writes)
def test_the_compiled_settling_stores_and_counts_as_the_reference(
    spec: list[tuple[float, bool]],
) -> None:
    loop = asyncio.new_event_loop()
    try:
        reference = _side(spec, loop)
        expected = _settle(reference, compiled=False)
        # The compiled loop on the compiled class, and on the reference's (by its fields).
        for kind in (_speedups.Publication, PyPublication):
            side = _side(spec, loop, kind)
            assert _settle(side, compiled=True) == expected
            assert _state(side) == _state(reference)
    finally:
        loop.close()


def test_the_compiled_publication_behaves_as_the_reference() -> None:
    loop = asyncio.new_event_loop()
    try:
        for kind in (PyPublication, _speedups.Publication):
            producer = cast(Producer, object())
            plain = kind(producer, 1 << 64, b"e", 3, 2.5, None, None)
            assert (plain.producer, plain.highest_sequence_id, plain.entry) == (
                producer,
                1 << 64,
                b"e",
            )
            assert (plain.chunk_id, plain.staged_at, plain.done, plain.ticket) == (
                3,
                2.5,
                False,
                None,
            )
            plain.resolve(Position(1, 2))
            assert (plain.done, plain.position, plain.error) == (True, Position(1, 2), None)
            future: asyncio.Future[Position | None] = loop.create_future()
            failed = kind(producer, 0, b"", -1, 0.0, None, future)
            failed.position = Position(1, 3)
            error = OSError("disk")
            failed.fail(error)
            assert (failed.done, failed.position, failed.error) == (True, None, error)
            assert future.exception() is error
            failed.fail(error)  # a settled future is left as it is
    finally:
        loop.close()


def test_the_tally_is_what_observe_would_count() -> None:
    ages = [0.0, 0.5, 0.50001, 1.0, 7.0, 1000.0, 1e6]
    spec: list[tuple[float, bool]] = [(age, False) for age in ages]
    one_by_one = Buckets(LATENCY_MS_BOUNDS)
    for age in ages:
        one_by_one.observe((100.0 - (100.0 - age / 1000)) * 1000)
    for compiled in (False, True):
        counted = Buckets(LATENCY_MS_BOUNDS)
        counts, total = _settle(_side(spec, None), compiled)
        counted.observe_counted(counts, total)
        counted.observe_counted(counts, total)  # a second group adds to the first
        assert counted.snapshot().counts == tuple(2 * c for c in one_by_one.snapshot().counts)
        assert counted.snapshot().total == 2 * one_by_one.snapshot().total


async def test_a_topic_settles_keyed_and_keyless_entries(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config(idempotency_window_max_keys=3))
    try:
        producer = await connect(topic, "p")
        keys = [None, "a", "b", None, "c", "d", "e"]
        pending = [
            topic.publish(producer, seq, seq, single(key, seq)) for seq, key in enumerate(keys)
        ]
        positions = await asyncio.gather(*pending)
        assert all(position is not None for position in positions)
        window = topic.idempotency
        assert window is not None
        # Every key durable, the count bound kept: the three newest stay.
        assert len(window) == 3
        assert [window.original_of(k) is not None for k in "abcde"] == [False] * 2 + [True] * 3
        assert topic.stats.publish_latency_ms.snapshot().count == len(keys)
        # A retry of a kept key is answered with its original's position.
        assert await topic.publish(producer, 9, 9, single("e", 9)) == positions[6]
    finally:
        await topic.close()


class _Marks:
    """A dedup that records the marks it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def on_persisted(self, name: str, highest: int, position: Position, count: int) -> None:
        self.calls.append(("whole", name, highest, position, count))

    def on_chunk_persisted(
        self, name: str, highest: int, chunk_id: int, position: Position
    ) -> None:
        self.calls.append(("chunk", name, highest, chunk_id, position))


@dataclass
class _Named:
    name: str


# One durable entry: its producer, its highest sequence id, its chunk id (-1: a whole message).
entries = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.integers(0, 20), st.just((1 << 64) - 1)),
        st.one_of(st.just(-1), st.integers(0, 3)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(entries)
def test_the_compiled_group_loops_do_what_the_reference_does(
    spec: list[tuple[str, int, int]],
) -> None:
    results = []
    for kind, entries_of, place, move in (
        (PyPublication, py_group_entries, py_place_group, py_move_dedup_marks),
        (
            _speedups.Publication,
            _speedups.group_entries,
            _speedups.place_group,
            _speedups.move_dedup_marks,
        ),
        (PyPublication, _speedups.group_entries, _speedups.place_group, _speedups.move_dedup_marks),
    ):
        group = [
            kind(cast(Producer, _Named(name)), highest, b"%d" % n, chunk, 0.0, None, None)
            for n, (name, highest, chunk) in enumerate(spec)
        ]
        written = entries_of(group)
        place(group, [Position(7, n) for n in range(len(group))])
        marks = _Marks()
        move(cast(Any, marks), group)
        results.append((written, [w.position for w in group], marks.calls))
    assert results[1] == results[0]
    assert results[2] == results[0]


def test_positions_must_match_the_group() -> None:
    group = [PyPublication(cast(Producer, None), 0, b"", -1, 0.0, None, None)]
    for place in (py_place_group, _speedups.place_group):
        with pytest.raises(ValueError):
            place(group, [])
