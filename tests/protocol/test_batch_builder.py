"""``pack_records``: records equal to ``single_metadata``'s, cuts by count and bytes, and the
compiled version giving the same bytes, stops and errors as the reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.batching import OutgoingMessage, single_metadata
from protocol import _speedups
from protocol.batch import decode_batch
from protocol.batch_builder import py_pack_records

COMPILED = _speedups.pack_records
texts = st.text(max_size=12)
rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), texts),
        st.one_of(st.none(), st.dictionaries(texts, texts, max_size=3)),
        st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
    ),
    min_size=1,
    max_size=30,
)


def _columns(
    data: list[tuple[Any, Any, Any, Any]],
) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    return (
        [r[0] for r in data],
        [r[1] for r in data],
        [r[2] for r in data],
        [r[3] for r in data],
    )


def _expected_records(data: list[tuple[Any, Any, Any, Any]], first: int) -> bytes:
    """The records as ``BatchBuilder`` writes them, one ``OutgoingMessage`` at a time."""
    out = b""
    for i, (payload, key, properties, event) in enumerate(data):
        message = OutgoingMessage(
            payload or b"",
            first + i,
            properties or {},
            key,
            None,
            event or 0,
            None,
            payload is None,
        )
        header = single_metadata(message).SerializeToString()
        out += len(header).to_bytes(4, "big") + header + (payload or b"")
    return out


@settings(max_examples=300, deadline=None)
@given(rows, st.integers(0, (1 << 40)))
def test_records_are_the_batch_builders(data: list[tuple[Any, Any, Any, Any]], first: int) -> None:
    payloads, keys, properties, events = _columns(data)
    for pack in (py_pack_records, COMPILED):
        packed, stop = pack(payloads, first, 0, 1000, 1 << 20, keys, properties, events)
        assert stop == len(data)
        assert packed == _expected_records(data, first)


@settings(max_examples=500, deadline=None)
@given(
    rows,
    st.integers(0, (1 << 64) + 5),
    st.integers(0, 29),
    st.integers(-1, 12),
    st.integers(-1, 400),
    st.booleans(),
)
def test_compiled_is_the_reference(
    data: list[tuple[Any, Any, Any, Any]],
    first: int,
    start: int,
    max_messages: int,
    max_bytes: int,
    explicit_ids: bool,
) -> None:
    payloads, keys, properties, events = _columns(data)
    ids = [first + 3 * i for i in range(len(data))] if explicit_ids else None
    outcomes = []
    for pack in (py_pack_records, COMPILED):
        try:
            outcomes.append(
                pack(payloads, first, start, max_messages, max_bytes, keys, properties, events, ids)
            )
        except (TypeError, ValueError) as exc:
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers((1 << 64) - 40, (1 << 64) - 1), st.integers(0, 29))
def test_ids_counting_past_the_top_fail_as_in_the_reference(
    count: int, first: int, start: int
) -> None:
    """The compiled path counts the ids after the first in C: the row whose id passes
    2**64-1 gets the reference's error, the rows before it the same records."""
    payloads = [bytes([i]) for i in range(count)]
    outcomes = []
    for pack in (py_pack_records, COMPILED):
        try:
            outcomes.append(pack(payloads, first, min(start, count - 1), 100, 1 << 20))
        except ValueError as exc:
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("pack", [py_pack_records, COMPILED])
def test_cuts_by_count_and_bytes(pack: Any) -> None:
    payloads = [bytes(10)] * 10
    packed, stop = pack(payloads, 5, 0, 4, 1 << 20)
    assert stop == 4
    assert [m.sequence_id for m in decode_batch(packed, 4)] == [5, 6, 7, 8]
    record = len(pack(payloads, 5, 0, 1, 1 << 20)[0])
    assert pack(payloads, 5, 2, 100, 3 * record)[1] == 5  # three records fit exactly
    assert pack(payloads, 5, 2, 100, 3 * record - 1)[1] == 4
    assert pack(payloads, 5, 9, 100, 1)[1] == 10  # a first record always goes in


@pytest.mark.parametrize("pack", [py_pack_records, COMPILED])
def test_bad_values_are_refused(pack: Any) -> None:
    with pytest.raises(TypeError, match="payload must be bytes"):
        pack(["text"], 0, 0, 10, 100)
    with pytest.raises(TypeError, match="a key must be a str"):
        pack([b"x"], 0, 0, 10, 100, [b"key"])
    with pytest.raises(TypeError, match="properties must be a mapping"):
        pack([b"x"], 0, 0, 10, 100, None, [[("a", "b")]])
    with pytest.raises(ValueError, match="does not follow"):
        pack([b"x", b"y"], 0, 0, 10, 100, sequence_ids=[4, 4])
    with pytest.raises(ValueError, match="outside"):
        pack([b"x"], (1 << 64), 0, 10, 100)
    with pytest.raises(ValueError, match="every column"):
        pack([b"x", b"y"], 0, 0, 10, 100, ["k"])
