"""MESSAGE runs: the compiled encoder against the reference, and the reference against the codec.

Generated runs (positions of every size, signed and past 64 bits, partitions or none,
redelivery counts, PIP-54 ack sets of signed and unsigned words, entries of any length) must
give the same bytes both ways; what the fast path does not take (wrong types, a short entry, a
redelivery count past 32 bits) must give the reference's bytes or its error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups, commands
from protocol.checksum import crc32c
from protocol.dispatch_frames import RunItem, py_encode_messages
from protocol.framing import PyFrameDecoder
from protocol.ids import MessageId
from tests.protocol.speedups_wire import EDGE_INTS

compiled = _speedups.bind_dispatch(py_encode_messages)

# Positions as callers pass them, and past the signed 64 bits MessageId takes (its error).
ids = st.one_of(
    st.sampled_from([*EDGE_INTS, -1, -(1 << 63), 1 << 64, (1 << 70) + 3]),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.integers(0, 1 << 20),
)
partitions = st.one_of(st.just(-1), st.integers(-5, 3), st.sampled_from([127, 128, (1 << 31) - 1]))
counts = st.one_of(st.just(0), st.integers(0, 300), st.sampled_from([(1 << 32) - 1]))
ack_sets: st.SearchStrategy[list[int] | None] = st.one_of(
    st.none(),
    st.just([]),
    st.lists(st.one_of(ids, st.integers(-(1 << 63), -1)), min_size=1, max_size=4),
)
entries = st.binary(min_size=4, max_size=400).map(lambda body: b"\x00\x00\x00\x02" + body)
items = st.tuples(st.tuples(ids, ids), entries, counts, ack_sets)


def both(consumer_id: int, partition: int, run: Sequence[Any]) -> tuple[object, object]:
    """Each side's bytes, or its error's class and message."""
    outcomes: list[object] = []
    for encode in (py_encode_messages, compiled):
        try:
            outcomes.append(encode(consumer_id, partition, run))
        except Exception as exc:
            outcomes.append((type(exc), str(exc)))
    return outcomes[0], outcomes[1]


@settings(max_examples=1500, deadline=None)
@given(ids, partitions, st.lists(items, max_size=6))
def test_same_bytes_on_generated_runs(consumer_id: int, partition: int, run: list[RunItem]) -> None:
    expected, got = both(consumer_id, partition, run)
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(ids, partitions, st.lists(items, min_size=1, max_size=3), st.data())
def test_what_the_fast_path_leaves_gets_the_reference_verdict(
    consumer_id: int, partition: int, run: list[RunItem], data: st.DataObject
) -> None:
    odd = data.draw(
        st.sampled_from(
            [
                ("entry", b"\x00\x00\x01"),  # shorter than its metadata size
                ("entry", memoryview(b"\x00\x00\x00\x00xy")),
                ("entry", bytearray(b"\x00\x00\x00\x00")),
                ("count", 1 << 32),
                ("count", -1),
                ("count", True),
                ("ack", [1, "x"]),
                ("ack", (3, 1 << 64)),
                ("ack", range(1, 3)),
                ("position", [1, 2]),
                ("position", (1, 2, 3)),
                ("position", (1.0, 2)),
                ("item", [(1, 2), b"\x00\x00\x00\x00", 0, None]),
                ("partition", 1 << 31),
                ("partition", True),
                ("run", None),  # a deque of the items
            ]
        )
    )
    what, value = odd
    index = data.draw(st.integers(0, len(run) - 1))
    position, entry, count, ack_set = run[index]
    changed: list[Any] = list(run)
    if what == "entry":
        changed[index] = (position, value, count, ack_set)
    elif what == "count":
        changed[index] = (position, entry, value, ack_set)
    elif what == "ack":
        changed[index] = (position, entry, count, value)
    elif what == "position":
        changed[index] = (value, entry, count, ack_set)
    elif what == "item":
        changed[index] = value
    elif what == "partition":
        assert isinstance(value, int)
        partition = value
    expected, got = both(consumer_id, partition, deque(changed) if what == "run" else changed)
    assert got == expected


def test_each_frame_decodes_to_what_was_sent() -> None:
    entry = b"\x00\x00\x00\x02\x08\x01payload"
    run: list[RunItem] = [((7, 0), entry, 0, None), ((7, 1), entry, 3, [0b101, -1])]
    data = compiled(42, 2, run)
    assert data == b"".join(
        commands.message(42, MessageId(7, i, 2), entry, count, ack)
        for (_, i), entry, count, ack in run
    )
    decoder = PyFrameDecoder()
    decoder.feed(data)
    frames = list(decoder)
    assert [f.command.message.message_id.entryId for f in frames] == [0, 1]
    assert [f.command.message.redelivery_count for f in frames] == [0, 3]
    assert list(frames[1].command.message.ack_set) == [0b101, -1]
    assert all(f.command.message.message_id.partition == 2 for f in frames)
    assert all(f.entry == entry and f.checksum_valid for f in frames)
    assert data[-len(entry) - 4 : -len(entry)] == crc32c(entry).to_bytes(4, "big")


def test_an_empty_run_is_no_bytes() -> None:
    assert compiled(1, -1, []) == py_encode_messages(1, -1, []) == b""


def test_a_short_entry_is_refused_as_the_codec_refuses_it() -> None:
    with pytest.raises(Exception, match="metadata size"):
        compiled(1, -1, [((1, 1), b"\x00", 0, None)])
