"""RowGather: the compiled class against the reference on generated chunked columns (32- and
64-bit offsets, slices, nulls, empty values, any order), and the refusals of bad buffers."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups
from protocol.row_gather import PyRowGather, RowGather

GATHERS = [PyRowGather, _speedups.RowGather]


def chunk(values: list[bytes | None], wide: bool, first: int = 0) -> tuple[Any, ...]:
    """An Arrow-style chunk of ``values`` (after ``first`` padding values, sliced off)."""
    padded = [b"pad"] * first + values
    bounds = [0]
    bits = bytearray((len(padded) + 7) // 8)
    for i, value in enumerate(padded):
        bounds.append(bounds[-1] + len(value or b""))
        if value is not None:
            bits[i >> 3] |= 1 << (i & 7)
    offsets = struct.pack(f"={len(bounds)}{'q' if wide else 'i'}", *bounds)
    validity = bytes(bits) if None in values else None
    return validity, offsets, b"".join(v or b"" for v in padded), first, len(values), wide


def order(rows: list[int]) -> bytes:
    return struct.pack(f"={len(rows)}q", *rows)


column = st.lists(st.one_of(st.none(), st.binary(max_size=30)), max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(column, st.booleans(), st.integers(0, 9)), max_size=5),
    st.data(),
)
def test_compiled_equals_reference(
    chunks: list[tuple[list[bytes | None], bool, int]], data: st.DataObject
) -> None:
    flat = [value for values, _, _ in chunks for value in values]
    given_chunks = [chunk(values, wide, first) for values, wide, first in chunks]
    rows = data.draw(st.lists(st.integers(0, len(flat) - 1), max_size=40)) if flat else []
    start = data.draw(st.integers(0, len(rows)))
    stop = data.draw(st.integers(start, len(rows)))
    raw = order(rows)
    expected = [flat[row] for row in rows[start:stop]]
    sizes = [len(flat[row] or b"") for row in rows[start:stop]]
    present = [len(v) for v in flat if v is not None]
    for gather_class in GATHERS:
        gather = gather_class(given_chunks)
        assert gather.values(raw, start, stop) == expected
        assert struct.unpack(f"={stop - start}q", gather.sizes(raw, start, stop)) == tuple(sizes)
        assert (gather.count, gather.nulls) == (len(flat), len(flat) - len(present))
        assert (gather.min_size, gather.max_size) == (
            min(present, default=-1),
            max(present, default=-1),
        )


def test_the_package_exports_the_compiled_class_unless_pure() -> None:
    from protocol import _accel

    expected = PyRowGather if _accel.speedups() is None else _speedups.RowGather
    assert RowGather is expected


@pytest.mark.parametrize("gather_class", GATHERS)
def test_bad_chunks_are_refused(gather_class: Any) -> None:
    _, offsets, data, _, _, _ = chunk([b"abc", b"de"], False)
    with pytest.raises(ValueError, match="too short"):
        gather_class([(None, offsets, data, 1, 2, False)])
    with pytest.raises(ValueError, match="outside"):
        gather_class([(None, struct.pack("=3i", 0, 9, 2), data, 0, 2, False)])
    with pytest.raises(ValueError, match="outside"):
        gather_class([(None, struct.pack("=3i", 0, 3, 2), data, 0, 2, False)])
    with pytest.raises(ValueError, match=">= 0"):
        gather_class([(None, offsets, data, -1, 1, False)])
    with pytest.raises(ValueError, match="validity"):
        gather_class([(b"", offsets, data, 0, 2, False)])


@pytest.mark.parametrize("gather_class", GATHERS)
def test_bad_orders_are_refused(gather_class: Any) -> None:
    gather = gather_class([chunk([b"abc", b"de"], False), chunk([b"f"], True)])
    assert gather.values(order([2, 0, 1]), 0, 3) == [b"f", b"abc", b"de"]
    for rows in ([3], [-1]):
        with pytest.raises(ValueError, match="out of range"):
            gather.values(order(rows), 0, 1)
        with pytest.raises(ValueError, match="out of range"):
            gather.sizes(order(rows), 0, 1)
    for start, stop in ((0, 4), (2, 1), (-1, 1)):
        with pytest.raises(ValueError, match="within the order"):
            gather.values(order([0, 1, 2]), start, stop)


@pytest.mark.parametrize("gather_class", GATHERS)
def test_an_unaligned_order_and_no_chunks(gather_class: Any) -> None:
    """An order buffer at any address (a slice of bytes) reads alike; no chunk: no rows."""
    gather = gather_class([chunk([b"a", None, b"bc"], False, first=3)])
    raw = memoryview(b"\0" + order([2, 1, 0]))[1:]
    assert gather.values(raw, 0, 3) == [b"bc", None, b"a"]
    empty = gather_class([])
    assert (empty.count, empty.min_size, empty.values(b"", 0, 0)) == (0, -1, [])
