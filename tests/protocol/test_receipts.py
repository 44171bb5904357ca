"""``protocol.receipts``: byte equality with the protobuf-built SEND_RECEIPT (hypothesis), and the
fast reader against the real codec, on receipts the real builders and the encoder write."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import FrameDecoder, encode_command
from protocol.ids import MessageId, from_u64
from protocol.receipts import (
    Receipt,
    ReceiptEncoder,
    ReceiptReader,
    encode_varint,
    parse_receipt,
    receipt_of,
)

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


# --- reading -----------------------------------------------------------------------------------

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
ids = st.one_of(st.just(-1), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))

receipt_frames = st.builds(
    lambda producer, sequence, ledger, entry, highest: commands.send_receipt(
        producer, sequence, MessageId(ledger, entry), highest
    ),
    u64,
    u64,
    ids,
    ids,
    st.one_of(st.none(), st.integers(min_value=-1, max_value=(1 << 63) - 1)),
)
other_frames = st.sampled_from(
    [
        commands.ping(),
        commands.pong(),
        commands.send_error(1, 5, ServerError.ChecksumError, "bad"),
        commands.close_producer(3),
        commands.success(7),
    ]
)


def decoded(frames: bytes) -> list[tuple[str, object]]:
    """What the codec sees: receipts as ``Receipt``, other frames by type."""
    decoder = FrameDecoder()
    decoder.feed(frames)
    out: list[tuple[str, object]] = []
    for frame in decoder:
        receipt = receipt_of(frame)
        out.append(("receipt", receipt) if receipt else ("other", frame.type))
    return out


@given(receipt_frames)
def test_fast_path_reads_every_receipt_like_the_codec(frame: bytes) -> None:
    fast = parse_receipt(frame, 4, len(frame))
    assert fast is not None
    assert [("receipt", fast)] == decoded(frame)


@settings(max_examples=300, deadline=None)
@given(any_id, any_id, position_id, position_id, any_id)
def test_what_the_encoder_writes_reads_back(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
) -> None:
    producer_id &= 2**64 - 1
    frame = ReceiptEncoder(producer_id).receipt(sequence_id, ledger_id, entry_id, highest)
    # Every id comes back as the signed 64-bit reading of its uint64 wire value.
    expected = Receipt(
        *(
            from_u64(value & 2**64 - 1)
            for value in (producer_id, sequence_id, ledger_id, entry_id, highest)
        )
    )
    assert parse_receipt(frame, 4, len(frame)) == expected
    assert [("receipt", expected)] == decoded(frame)
    reader = ReceiptReader()
    assert reader.feed(frame) == ([expected], [])
    assert (reader.fast, reader.decoded) == (1, 0)


@given(st.lists(st.one_of(receipt_frames, other_frames), max_size=12), st.data())
def test_reader_over_arbitrary_chunks_matches_the_codec(
    frames: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = ReceiptReader()
    receipts: list[Receipt] = []
    others: list[int] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got_receipts, got_others = reader.feed(stream[start:end])
        receipts += got_receipts
        others += [frame.type for frame in got_others]
    expected = decoded(stream)
    assert receipts == [value for kind, value in expected if kind == "receipt"]
    assert others == [value for kind, value in expected if kind == "other"]
    assert reader.fast == len(receipts)  # every real receipt took the fast path


def test_unexpected_shapes_fall_back_to_the_codec() -> None:
    # A receipt whose message id carries a partition: valid, but not the plain shape.
    command = pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT)
    command.send_receipt.producer_id = 1
    command.send_receipt.sequence_id = 2
    command.send_receipt.message_id.ledgerId = 3
    command.send_receipt.message_id.entryId = 4
    command.send_receipt.message_id.partition = 5
    frame = encode_command(command)
    assert parse_receipt(frame, 4, len(frame)) is None
    reader = ReceiptReader()
    receipts, others = reader.feed(frame)
    assert receipts == [Receipt(1, 2, 3, 4, None)]
    assert others == []
    assert (reader.fast, reader.decoded) == (0, 1)


def test_duplicate_receipt_is_recognised() -> None:
    frame = commands.send_receipt(1, 9, MessageId(-1, -1))
    receipt = parse_receipt(frame, 4, len(frame))
    assert receipt is not None
    assert receipt.is_duplicate
