"""``protocol.receipts``: byte equality with the protobuf-built SEND_RECEIPT (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import commands, pb
from protocol.framing import FrameDecoder
from protocol.ids import MessageId
from protocol.receipts import ReceiptEncoder, encode_varint

# Signed 64-bit ids (as the broker holds them: -1 for a duplicate's message id) and the uint64
# range sequence ids arrive in; boundaries of every varint length are reached by the strategy.
any_id = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from(
        [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**63, 2**64 - 1, -1]
    ),
    # Every varint length of the encoder's spelled-out branches (2 to 4 bytes).
    st.integers(min_value=2**7, max_value=2**28),
)
# Ledger and entry ids are signed 64-bit (``MessageId`` refuses others): -1 for a duplicate.
position_id = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([-1, 0, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**63 - 1]),
    st.integers(min_value=2**7, max_value=2**28),
)


@settings(max_examples=500, deadline=None)
@given(any_id, any_id, position_id, position_id, any_id)
def test_receipt_equals_protobuf_encoding(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
) -> None:
    producer_id &= 2**64 - 1
    expected = commands.send_receipt(
        producer_id, sequence_id, MessageId(ledger_id, entry_id), highest
    )
    assert ReceiptEncoder(producer_id).receipt(sequence_id, ledger_id, entry_id, highest) == (
        expected
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(any_id, position_id, position_id, any_id), min_size=1, max_size=20))
def test_one_encoder_over_many_receipts_and_ledgers(
    receipts: list[tuple[int, int, int, int]],
) -> None:
    """The per-ledger cache is refreshed when the ledger changes (a roll mid-stream)."""
    encoder = ReceiptEncoder(3)
    for sequence_id, ledger_id, entry_id, highest in receipts:
        expected = commands.send_receipt(3, sequence_id, MessageId(ledger_id, entry_id), highest)
        assert encoder.receipt(sequence_id, ledger_id, entry_id, highest) == expected


def test_duplicate_receipt_decodes_as_minus_one() -> None:
    decoder = FrameDecoder()
    decoder.feed(ReceiptEncoder(7).receipt(41, -1, -1, 43))
    (frame,) = list(decoder)
    assert frame.type == pb.BaseCommand.SEND_RECEIPT
    receipt = frame.command.send_receipt
    assert (receipt.producer_id, receipt.sequence_id, receipt.highest_sequence_id) == (7, 41, 43)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (2**64 - 1, 2**64 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16384, b"\x80\x80\x01"),
    ],
)
def test_varint_known_values(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_equals_protobuf_varint(value: int) -> None:
    # A uint64 field holding ``value`` serialises as its tag byte (0x08) then the varint.
    assert (
        encode_varint(value)
        == pb.MessageIdData(ledgerId=value, entryId=0).SerializeToString()[1:-2]
    )


def test_varint_of_minus_one_is_ten_bytes() -> None:
    assert encode_varint(-1) == b"\xff" * 9 + b"\x01"
