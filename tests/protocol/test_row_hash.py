"""rowhash64 v1: pinned values (the hash is part of the Spark sink's exactly-once numbering and
must never change), and the compiled ``row_hashes`` against the reference on generated columns
(32- and 64-bit offsets, slices, empty values)."""

from __future__ import annotations

import random
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups
from protocol.row_hash import py_hash_order, py_row_hashes, row_hash64, row_hashes

# Computed once by the reference and pinned: a change here renumbers every retried task.
PINNED = [
    (b"", 0xEF46DB3751D8E999),
    (b"a", 0xA563C3D1B633E001),
    (b"abcdefgh", 0x3AD351775B4634B7),
    (b"abcdefghi", 0x3B800D5F57E69199),
    (bytes(range(256)), 0xC4430AEFAC994447),
    (b"x" * 100, 0xE86C2242E43E42C8),
    (b"0".rjust(100, b"x"), 0x51033EFB5FE17B6E),
]


def column(values: list[bytes], wide: bool) -> tuple[bytes, bytes]:
    """An Arrow-style binary column's offsets and data buffers."""
    bounds = [0]
    for value in values:
        bounds.append(bounds[-1] + len(value))
    form = "q" if wide else "i"
    return struct.pack(f"={len(bounds)}{form}", *bounds), b"".join(values)


@pytest.mark.parametrize(("value", "expected"), PINNED)
def test_pinned_values(value: bytes, expected: int) -> None:
    assert row_hash64(value) == expected
    for wide in (False, True):
        offsets, data = column([value], wide)
        for hashes in (row_hashes, py_row_hashes, _speedups.row_hashes):
            assert struct.unpack("=Q", hashes(offsets, data, 0, 1, wide)) == (expected,)


def test_the_package_exports_the_compiled_loop_unless_pure() -> None:
    from protocol import _accel

    expected = py_row_hashes if _accel.speedups() is None else _speedups.row_hashes
    assert row_hashes is expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.booleans(), st.data())
def test_compiled_equals_reference(values: list[bytes], wide: bool, data: st.DataObject) -> None:
    offsets, raw = column(values, wide)
    first = data.draw(st.integers(0, len(values)))
    count = data.draw(st.integers(0, len(values) - first))
    compiled = _speedups.row_hashes(offsets, raw, first, count, wide)
    assert compiled == py_row_hashes(offsets, raw, first, count, wide)
    assert struct.unpack(f"={count}Q", compiled) == tuple(
        row_hash64(v) for v in values[first : first + count]
    )


@pytest.mark.parametrize("hashes", [py_row_hashes, _speedups.row_hashes])
def test_bad_buffers_are_refused(hashes: object) -> None:
    offsets, data = column([b"abc", b"de"], False)
    with pytest.raises(ValueError, match="too short"):
        hashes(offsets, data, 1, 2, False)  # type: ignore[operator]
    with pytest.raises(ValueError, match="outside"):
        hashes(struct.pack("=3i", 0, 9, 2), data, 0, 2, False)  # type: ignore[operator]
    with pytest.raises(ValueError, match=">= 0"):
        hashes(offsets, data, -1, 1, False)  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 7, 2**64 - 1])), max_size=60),
    st.data(),
)
def test_hash_order_compiled_equals_reference(hashes: list[int], data: st.DataObject) -> None:
    """The radix sort gives the reference's stable order and tie verdict (duplicates drawn
    often), on any window of the buffer."""
    raw = struct.pack(f"={len(hashes)}Q", *hashes)
    first = data.draw(st.integers(0, len(hashes)))
    count = data.draw(st.integers(0, len(hashes) - first))
    compiled = _speedups.hash_order(raw, first, count)
    assert compiled == py_hash_order(raw, first, count)
    order = struct.unpack(f"={count}q", compiled[0])
    window = hashes[first : first + count]
    assert list(order) == sorted(range(count), key=window.__getitem__)
    assert compiled[1] == (len(set(window)) < count)


@pytest.mark.parametrize("order", [py_hash_order, _speedups.hash_order])
def test_hash_order_refuses_a_short_buffer(order: object) -> None:
    with pytest.raises(ValueError, match="too short"):
        order(struct.pack("=2Q", 1, 2), 1, 2)  # type: ignore[operator]
    with pytest.raises(ValueError, match=">= 0"):
        order(b"", 0, -1)  # type: ignore[operator]


def _reference_order(hashes: list[int]) -> tuple[bytes, bool]:
    return py_hash_order(struct.pack(f"={len(hashes)}Q", *hashes), 0, len(hashes))


@pytest.mark.parametrize("count", [1, 2, 3, 1000, 70_000, 100_000])
def test_hash_order_of_uniform_hashes_at_task_sizes(count: int) -> None:
    """Uniform hashes (the bucket sort's case: up to 2^16 buckets) at the sizes a sink task
    sorts, with a few equal ones among them, give the reference's order and tie verdict."""
    rng = random.Random(count)
    hashes = [rng.getrandbits(64) for _ in range(count)]
    for at in range(0, count, 997):  # some ties, far apart
        hashes[at] = hashes[at // 2]
    raw = struct.pack(f"={count}Q", *hashes)
    assert _speedups.hash_order(raw, 0, count) == _reference_order(hashes)


def test_hash_order_reuses_its_scratch_across_calls_and_threads() -> None:
    """The scratch kept from one call to the next (larger, smaller, then larger again, and the
    crowded fallback in between) never leaks into a result, nor when threads sort at once
    (the sort runs without the GIL: a call finding the scratch taken allocates its own)."""
    rng = random.Random(7)
    cases = []
    for count in (50_000, 3, 20_000, 120_000, 1):
        hashes = [rng.getrandbits(64) for _ in range(count)]
        cases.append((struct.pack(f"={count}Q", *hashes), _reference_order(hashes)))
    crowded = [(1 << 63) | rng.getrandbits(20) for _ in range(2000)]
    cases.insert(2, (struct.pack("=2000Q", *crowded), _reference_order(crowded)))
    for raw, expected in cases:
        assert _speedups.hash_order(raw, 0, len(raw) // 8) == expected

    def sort_all(_: int) -> bool:
        return all(_speedups.hash_order(raw, 0, len(raw) // 8) == want for raw, want in cases)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(sort_all, range(16)))


@pytest.mark.parametrize("shared_bits", [16, 40, 64])
def test_hash_order_of_crowded_buckets_falls_back_alike(shared_bits: int) -> None:
    """Hashes sharing their top bits crowd one bucket past its bound (the LSD sort takes
    over): still the reference's order, ties included."""
    rng = random.Random(shared_bits)
    prefix = rng.getrandbits(shared_bits) << (64 - shared_bits)
    low = (1 << (64 - shared_bits)) - 1
    hashes = [prefix | (rng.getrandbits(64) & low) for _ in range(3000)]
    hashes += hashes[:50]  # ties
    rng.shuffle(hashes)
    raw = struct.pack(f"={len(hashes)}Q", *hashes)
    assert _speedups.hash_order(raw, 0, len(hashes)) == _reference_order(hashes)


@pytest.mark.parametrize("wide", [False, True])
def test_compiled_equals_reference_on_long_values_of_mixed_lengths(wide: bool) -> None:
    """Values long enough for many words hashed four at a time in lockstep, of lengths that
    differ inside a four (each finishes alone from the shortest one's last whole word)."""
    rng = random.Random(25)
    values = [rng.randbytes(rng.choice([0, 7, 8, 9, 100, 101, 257])) for _ in range(1003)]
    offsets, raw = column(values, wide)
    for first, count in ((0, 1003), (1, 1000), (5, 3), (1003, 0)):
        compiled = _speedups.row_hashes(offsets, raw, first, count, wide)
        assert compiled == py_row_hashes(offsets, raw, first, count, wide)
