"""The compiled ReceiptEncoder, settled-run receipts and CRC-32C against the reference, on
generated values."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import crc32c as package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups
from protocol.checksum import py_crc32c
from protocol.receipts import PyReceiptEncoder, py_take_settled_receipts
from tests.protocol.speedups_wire import EDGE_INTS

# Ids as callers pass them: uint64 wire values, signed ones (-1 for a duplicate's message id),
# and values past 64 bits (written mod 2**64 by both).
ids = st.one_of(
    st.sampled_from([*EDGE_INTS, -1, -2, -(1 << 63), 1 << 64, (1 << 70) + 3]),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.integers(0, 1 << 30),
)


@settings(max_examples=1000, deadline=None)
@given(ids, st.lists(st.tuples(ids, ids, ids, ids), min_size=1, max_size=5))
def test_same_receipt_bytes(producer_id: int, receipts: list[tuple[int, int, int, int]]) -> None:
    # One encoder per side for the list: the reference caches the ledger's bytes between calls.
    reference, compiled = PyReceiptEncoder(producer_id), _speedups.ReceiptEncoder(producer_id)
    for sequence_id, ledger_id, entry_id, highest in receipts:
        expected = reference.receipt(sequence_id, ledger_id, entry_id, highest)
        assert compiled.receipt(sequence_id, ledger_id, entry_id, highest) == expected


def test_the_check_value() -> None:
    assert _speedups.crc32c(b"123456789") == 0xE3069283
    assert _speedups.crc32c_tables(b"123456789") == 0xE3069283


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 0xFFFFFFFF), st.integers(0, 300))
def test_same_crc_as_the_package(data: bytes, value: int, cut: int) -> None:
    """Both C paths (the instruction where the CPU has it, and the tables), continued or not."""
    expected = package.crc32c(data, value)
    assert _speedups.crc32c(data, value) == expected == py_crc32c(data, value)
    assert _speedups.crc32c_tables(data, value) == expected
    head, tail = data[:cut], data[cut:]
    assert _speedups.crc32c(memoryview(tail), _speedups.crc32c(bytearray(head))) == (
        package.crc32c(data)
    )


STRIPES = 3 * 4096  # what the instruction path runs as three interleaved CRCs


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 4 * STRIPES + 9).flatmap(lambda size: st.binary(min_size=size, max_size=size)),
    st.integers(0, 0xFFFFFFFF),
)
def test_same_crc_as_the_package_across_the_interleaved_stripes(data: bytes, value: int) -> None:
    expected = package.crc32c(data, value)
    assert _speedups.crc32c(data, value) == expected == _speedups.crc32c_tables(data, value)


@pytest.mark.parametrize("size", [STRIPES - 1, STRIPES, STRIPES + 1, 2 * STRIPES, 100_000])
def test_interleaved_stripes_at_their_edges(size: int) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    for value in (0, 0xFFFFFFFF, 0x12345678):
        assert _speedups.crc32c(data, value) == package.crc32c(data, value)


def test_odd_arguments_get_the_package_verdict() -> None:
    for data, value in (("text", 0), (b"x", -1), (b"x", 1 << 32), (memoryview(b"abcd")[::2], 0)):
        try:
            expected: object = package.crc32c(data, value)
        except Exception as exc:
            expected = type(exc)
        try:
            got: object = _speedups.crc32c(data, value)
        except Exception as exc:
            got = type(exc)
        assert got == expected, (data, value)


@dataclass(frozen=True)
class Outcome:
    done: bool
    position: tuple[int, int] | None
    error: BaseException | None


outcomes = st.builds(
    Outcome,
    st.booleans(),
    st.one_of(st.none(), st.tuples(ids, ids)),
    st.one_of(st.none(), st.none(), st.just(ValueError("refused"))),
)


@settings(max_examples=1000, deadline=None)
@given(ids, st.lists(st.tuples(ids, ids, outcomes), max_size=8))
def test_same_settled_run_receipts(
    producer_id: int, pending: list[tuple[int, int, Outcome]]
) -> None:
    """`take_settled_receipts`: the same bytes and count, and the same entries left behind
    (it stops at the first unsettled outcome or the first error), as the reference; each frame
    equals the encoder's receipt (a duplicate, with no position: -1:-1)."""
    reference_queue, compiled_queue = deque(pending), deque(pending)
    data, count = py_take_settled_receipts(producer_id, reference_queue)  # type: ignore[arg-type]
    assert _speedups.take_settled_receipts(producer_id, compiled_queue) == (data, count)
    assert compiled_queue == reference_queue
    encoder = PyReceiptEncoder(producer_id)
    expected = b""
    for sequence_id, highest, outcome in pending[:count]:
        assert outcome.done
        assert outcome.error is None
        ledger_id, entry_id = outcome.position or (-1, -1)
        expected += encoder.receipt(sequence_id, ledger_id, entry_id, highest)
    assert data == expected
    if reference_queue:
        head = reference_queue[0][2]
        assert not head.done or head.error is not None
