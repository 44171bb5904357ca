"""The receipt fast path against the real codec, on receipts the real builders encode."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.perf.receipts import Receipt, ReceiptReader, parse_receipt, receipt_of
from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import ServerError
from protocol.framing import FrameDecoder, encode_command
from protocol.ids import MessageId

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
