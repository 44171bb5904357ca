"""The compiled FrameDecoder against the reference: same frames, values and errors.

Generated streams of SEND frames (valid and malformed: every CommandSend field combination,
fields out of order, repeated, of the wrong wire type, unknown, over-long varints; truncated
frames, wrong sizes, bad CRCs, broker entry metadata; mixed with other commands), fed to both
decoders in the same random chunks. Each frame must match field for field, including the
dedup identity (``of_send``) the broker takes from it, and each error must have the same class
and message, at the same place in the stream.
"""

from __future__ import annotations

import gc
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import _speedups, commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import RemoteProtocolError
from protocol.framing import DEFAULT_MAX_FRAME_SIZE, PyFrameDecoder
from protocol.send_identity import py_of_send
from tests.protocol.speedups_wire import (
    SEND_NAMES,
    commands_around,
    field_bytes,
    fields_of,
    frame_of,
    full_command,
    ints,
    mutated_frames,
    outcomes,
    socket_streams,
    varint,
)

SEND_FIELDS = {1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0, 8: 0, 9: 2}
MESSAGE_ID = pb.MessageIdData(ledgerId=3, entryId=4).SerializeToString()


# --- generators -----------------------------------------------------------------------------


@st.composite
def send_bodies(draw: st.DrawFn) -> bytes:
    """A CommandSend: the canonical protobuf encoding of random values, or hand-written fields."""
    if draw(st.booleans()):
        send = pb.CommandSend()
        required = draw(st.integers(0, 9)) > 0  # mostly a complete command
        for index, name in enumerate(SEND_NAMES[:8]):
            if (required and index < 2) or draw(st.booleans()):
                value = draw(ints)
                if name in ("is_chunk", "marker"):
                    setattr(send, name, bool(value))
                elif name == "num_messages":
                    send.num_messages = (value + (1 << 31)) % (1 << 32) - (1 << 31)
                else:
                    setattr(send, name, value % (1 << 64))
        if draw(st.integers(0, 5)) == 0:
            send.message_id.ledgerId = 1
            if draw(st.booleans()):
                send.message_id.entryId = 2
        return send.SerializePartialToString()
    lengths = st.one_of(st.just(MESSAGE_ID), st.binary(max_size=8))
    head = b"" if draw(st.integers(0, 4)) == 0 else b"\x08\x01\x10\x02"
    return head + draw(fields_of(SEND_FIELDS, lengths))


@st.composite
def send_frames(draw: st.DrawFn) -> bytes:
    wrong_types = [b"\x08\x07", b"\x08\x86\x00", b"\x08\xe7\x07"]
    return draw(mutated_frames(draw(commands_around(draw(send_bodies()), 6, wrong_types))))


other_frames = st.sampled_from(
    [commands.ping(), commands.pong(), commands.flow(1, 100), commands.close_producer(1, 2)]
)


def streams() -> st.SearchStrategy[tuple[list[bytes], int]]:
    frames = st.one_of(send_frames(), send_frames(), other_frames)
    return socket_streams(frames, [DEFAULT_MAX_FRAME_SIZE] * 16 + [200, 8, 1 << 40])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_same_frames_and_errors_on_generated_streams(stream: tuple[list[bytes], int]) -> None:
    chunks, limit = stream
    reference = outcomes(PyFrameDecoder(limit), chunks, py_of_send)
    compiled = outcomes(_speedups.FrameDecoder(limit), chunks, _speedups.of_send)
    assert compiled == reference


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(0, 80))
def test_sends_assembled_in_place_decode_as_the_reference(
    stream: tuple[list[bytes], int], assemble_over: int
) -> None:
    """The path of large SENDs (assembled into their entry as reads arrive), taken by every
    frame from ``assemble_over`` bytes: the same frames, errors and buffered counts."""
    chunks, limit = stream
    reference = outcomes(PyFrameDecoder(limit), chunks, py_of_send)
    assembling = _speedups.FrameDecoder(limit, assemble_over=assemble_over)
    assert outcomes(assembling, chunks, _speedups.of_send) == reference


class WindowReads:
    """A decoder read as the broker's connection reads a socket: the bytes of a SEND being
    assembled are written into ``entry_window`` (no copy), the rest is fed."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.window_bytes = 0

    def feed(self, chunk: bytes) -> None:
        window = self.decoder.entry_window()
        if window is not None:
            taken = min(len(window), len(chunk))
            window[:taken] = chunk[:taken]
            self.decoder.entry_received(taken)
            self.window_bytes += taken
            chunk = chunk[taken:]
        if chunk:
            self.decoder.feed(chunk)

    def __iter__(self) -> Any:
        return iter(self.decoder)

    @property
    def buffered(self) -> int:
        return int(self.decoder.buffered)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(0, 80))
def test_sends_read_into_their_entry_window_decode_as_the_reference(
    stream: tuple[list[bytes], int], assemble_over: int
) -> None:
    """The socket writing straight into a large SEND's entry (``entry_window``): the same
    frames, errors and buffered counts as the reference fed every byte."""
    chunks, limit = stream
    reference = outcomes(PyFrameDecoder(limit), chunks, py_of_send)
    reads = WindowReads(_speedups.FrameDecoder(limit, assemble_over=assemble_over))
    assert outcomes(reads, chunks, _speedups.of_send) == reference


def test_a_large_send_read_through_its_window_is_not_copied_by_the_decoder() -> None:
    entry = b"\x00\x00\x00\x02\x0a\x00" + bytes(range(256)) * 800  # 200 KB
    data = commands.send(3, 9, entry) + commands.ping()
    reads = WindowReads(_speedups.FrameDecoder())
    decoded = []
    for start in range(0, len(data), 7001):
        reads.feed(data[start : start + 7001])
        decoded.extend(reads)
    assert [f.type for f in decoded] == [pb.BaseCommand.SEND, pb.BaseCommand.PING]
    assert decoded[0].entry == entry
    assert decoded[0].checksum_valid
    assert reads.window_bytes > len(entry) - 2 * 7001  # all but the first read's share
    assert reads.decoder.entry_window() is None


def test_entry_received_refuses_more_than_the_window() -> None:
    decoder = _speedups.FrameDecoder()
    with pytest.raises(ValueError, match="do not fit"):
        decoder.entry_received(1)  # no SEND being assembled
    data = commands.send(3, 9, b"\x00\x00\x00\x02\x0a\x00" + bytes(100_000))
    decoder.feed(data[:1000])
    assert list(decoder) == []
    window = decoder.entry_window()
    assert window is not None
    with pytest.raises(ValueError, match="do not fit"):
        decoder.entry_received(len(window) + 1)
    assert PyFrameDecoder().entry_window() is None  # the reference never assembles


@pytest.mark.parametrize("checksum", [True, False])
def test_a_large_send_in_many_reads_is_one_copy_of_its_entry(checksum: bool) -> None:
    entry = b"\x00\x00\x00\x02\x0a\x00" + bytes(range(256)) * 800  # 200 KB
    frame = commands.send(3, 9, entry, checksum=checksum)
    following = commands.ping()
    data = frame + following
    decoder = _speedups.FrameDecoder()
    decoded = []
    for start in range(0, len(data), 7001):  # reads cutting the head, the entry and the PING
        decoder.feed(memoryview(data)[start : start + 7001])
        decoded.extend(decoder)
    assert [f.type for f in decoded] == [pb.BaseCommand.SEND, pb.BaseCommand.PING]
    send = decoded[0]
    assert type(send.entry) is bytes
    assert send.entry == entry
    assert send.checksum_valid
    assert send.has_checksum is checksum
    assert send.entry_crc == (crc32c.crc32c(entry) if checksum else -1)
    assert (send.command.send.producer_id, send.command.send.sequence_id) == (3, 9)
    assert decoder.buffered == 0


def test_a_decoded_send_is_freed_without_the_cyclic_collector() -> None:
    """The SEND command and its fields hold no references back to one another: a frame is
    freed when dropped, not left to a collection (as the consumer's MESSAGE frames, issue
    #23). Asked for a field they do not hold, the fields still answer from the bytes."""
    entry = b"\x00\x00\x00\x02\x0a\x00payload"
    gc.collect()
    gc.disable()
    try:
        decoder = _speedups.FrameDecoder()
        decoder.feed(commands.send(7, 3, entry, num_messages=2) * 50)
        frames = list(decoder)
        assert len(frames) == 50
        for frame in frames:
            send: Any = frame.command.send
            assert isinstance(frame.command, _speedups.SendCommand)
            assert (send.producer_id, send.sequence_id, send.num_messages) == (7, 3, 2)
            assert not send.HasField("txnid_least_bits")
            assert send.HasField("producer_id")
            assert not send.HasField("message_id")  # parsed from the bytes on use
        del frames, frame, send
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_ordinary_sends_take_the_fast_path() -> None:
    """The frames our builders write (as every client does) never reach the fallback."""
    entry = b"\x00\x00\x00\x02\x0a\x00payload"
    frames = [
        commands.send(1, 2, entry),
        commands.send(1, 2**64 - 1, entry, num_messages=5, highest_sequence_id=2**63),
        commands.send(7, 0, entry, is_chunk=True, marker=True, checksum=False),
    ]
    decoder = _speedups.FrameDecoder()
    decoder.feed(b"".join(frames))
    decoded = list(decoder)
    assert [type(frame.command) for frame in decoded] == [_speedups.SendCommand] * 3
    assert [_speedups.of_send(frame.command.send) for frame in decoded] == [
        (2, 2, 1),
        (2**64 - 1, 2**64 - 1, 5),  # the stated highest is below the first id: the first wins
        (0, 0, 1),
    ]
    assert decoded[2].command.send.is_chunk
    assert not decoded[2].has_checksum


def test_a_batch_at_the_top_of_the_id_space_does_not_wrap() -> None:
    """first + n - 1 past 2**64 - 1 stays a Python int, as in the reference."""
    frame = commands.send(1, 2**64 - 2, b"\x00\x00\x00\x00", num_messages=9)
    decoder = _speedups.FrameDecoder()
    decoder.feed(frame)
    [decoded] = list(decoder)
    assert _speedups.of_send(decoded.command.send) == (2**64 - 2, 2**64 + 6, 9)
    reference = PyFrameDecoder()
    reference.feed(frame)
    assert py_of_send(next(reference).command.send) == (2**64 - 2, 2**64 + 6, 9)


def test_the_rest_of_the_protobuf_api_still_answers() -> None:
    """Code that reads more of a SEND than the broker does gets the parsed message."""
    decoder = _speedups.FrameDecoder()
    decoder.feed(commands.send(4, 5, b"\x00\x00\x00\x00", num_messages=2))
    [frame] = list(decoder)
    send: Any = frame.command.send
    assert send.txnid_least_bits == 0
    assert not send.HasField("message_id")
    assert send.message_id.ledgerId == 0  # not a fast field: from the parsed command
    assert frame.command.WhichOneof is not None
    reference = PyFrameDecoder()
    reference.feed(commands.send(4, 5, b"\x00\x00\x00\x00", num_messages=2))
    assert frame.command == next(reference).command
    assert "producer_id: 4" in repr(send)


def test_a_varint_past_64_bits_is_left_to_the_reference() -> None:
    body = b"\x08\x01\x10" + b"\xff" * 10 + b"\x01"  # sequence_id of 11 bytes: corrupt
    frame = frame_of(field_bytes(1, 0, 6) + field_bytes(6, 2, body), b"\x00\x00\x00\x00")
    errors = []
    for decoder in (PyFrameDecoder(), _speedups.FrameDecoder()):
        decoder.feed(frame)
        try:
            next(decoder)
        except RemoteProtocolError as exc:
            errors.append(str(exc))
    assert len(errors) == 2
    assert errors[0] == errors[1]
    assert "cannot parse BaseCommand" in errors[0]


def test_over_long_tags_and_values_match() -> None:
    """An over-long varint is still the same number to upb; both give the same frame."""
    body = b"\x88\x80\x00\x01" + b"\x10" + varint(9, pad=3)  # tag of field 1 in 3 bytes
    frame = frame_of(field_bytes(1, 0, 6) + field_bytes(6, 2, body), b"\x00\x00\x00\x00")
    assert outcomes(_speedups.FrameDecoder(), [frame], _speedups.of_send) == outcomes(
        PyFrameDecoder(), [frame], py_of_send
    )


@pytest.mark.parametrize("decoder_class", [_speedups.FrameDecoder, PyFrameDecoder])
def test_fed_bytes_may_be_reused_at_once(decoder_class: Any) -> None:
    """The connection reads every socket read into one buffer per thread and reuses it for the
    next read, whether or not the frames of the last one were taken yet: a decoder owns what
    it was fed once ``feed`` returns (the compiled one decodes the whole frames then, straight
    from the caller's bytes, and keeps only the cut one)."""
    frames = [
        commands.connect("reuse", protocol_version=20, auth_method_name="basic", auth_data=b"u:p"),
        commands.send(1, 2, b"\x00\x00\x00\x02\x0a\x00" + b"p" * 300),
        commands.ping(),
        commands.send(1, 3, b"\x00\x00\x00\x02\x0a\x00" + b"q" * 70_000),
    ]
    stream = b"".join(frames)
    reference = PyFrameDecoder()
    reference.feed(stream)
    expected = [(f.type, f.entry, full_command(f).SerializeToString()) for f in reference]
    assert len(expected) == len(frames)
    kwargs = {} if decoder_class is PyFrameDecoder else {"assemble_over": 1 << 30}
    decoder = decoder_class(**kwargs)  # the large SEND too is cut by reads, so buffered
    inbox = bytearray(len(stream))
    got = []
    position = 0
    for end in (5, 60, 400, len(stream) - 1000, len(stream)):  # cuts inside frames
        inbox[: end - position] = stream[position:end]
        decoder.feed(memoryview(inbox)[: end - position])
        inbox[:] = b"\xee" * len(inbox)  # the next read overwrites it before any iteration
        position = end
        got.extend((f.type, f.entry, full_command(f).SerializeToString()) for f in decoder)
    assert got == expected
    assert decoder.buffered == 0
