"""The compiled FrameDecoder against the reference on MESSAGE frames (what a client receives).

Generated streams of MESSAGE frames, valid and malformed: every CommandMessage and
MessageIdData field, out of order, repeated, of the wrong wire type, unknown, over-long
varints, ack sets and chunk ids (left to the reference), truncated frames, wrong sizes, bad
CRCs, broker entry metadata; fed to both decoders in the same random chunks. Each frame must
match field for field (the attributes a consumer reads and ``HasField``), each error in class,
message and place.
"""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import _speedups, commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.framing import DEFAULT_MAX_FRAME_SIZE, PyFrameDecoder
from protocol.send_identity import py_of_send
from tests.protocol.speedups_wire import (
    U64,
    commands_around,
    field_bytes,
    fields_of,
    frame_of,
    ints,
    mutated_frames,
    outcomes,
    socket_streams,
)

MESSAGE_FIELDS = {1: 0, 2: 2, 3: 0, 4: 0, 5: 0}
MESSAGE_ID_FIELDS = {1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 2}


@st.composite
def message_ids(draw: st.DrawFn) -> bytes:
    """A MessageIdData: canonical (sometimes with partition, batch index, ack set, chunk id)
    or hand-written fields."""
    if draw(st.integers(0, 4)):
        message_id = pb.MessageIdData()
        if draw(st.integers(0, 19)):
            message_id.ledgerId = draw(ints) % (1 << 64)
        if draw(st.integers(0, 19)):
            message_id.entryId = draw(ints) % (1 << 64)
        if draw(st.booleans()):
            message_id.partition = draw(st.integers(-(1 << 31), (1 << 31) - 1))
        if draw(st.booleans()):
            message_id.batch_index = draw(st.integers(-1, 1000))
        if draw(st.integers(0, 5)) == 0:
            message_id.ack_set.extend(draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1))))
        if draw(st.integers(0, 7)) == 0:
            message_id.first_chunk_message_id.ledgerId = 1
            message_id.first_chunk_message_id.entryId = 2
        return message_id.SerializePartialToString()
    return draw(fields_of(MESSAGE_ID_FIELDS, st.binary(max_size=6)))


@st.composite
def message_bodies(draw: st.DrawFn) -> bytes:
    """A CommandMessage: canonical (mostly complete) or hand-written fields."""
    if draw(st.integers(0, 4)):
        body = b""
        if draw(st.integers(0, 19)):
            body += field_bytes(1, 0, draw(ints))
        if draw(st.integers(0, 19)):
            body += field_bytes(2, 2, draw(message_ids()))
        if draw(st.booleans()):
            body += field_bytes(3, 0, draw(st.one_of(st.integers(0, 20), ints)))
        if draw(st.integers(0, 5)) == 0:
            body += b"".join(field_bytes(4, 0, draw(ints)) for _ in range(draw(st.integers(1, 3))))
        if draw(st.booleans()):
            body += field_bytes(5, 0, draw(ints))
        return body
    return draw(fields_of(MESSAGE_FIELDS, message_ids()))


@st.composite
def message_frames(draw: st.DrawFn) -> bytes:
    wrong_types = [b"\x08\x07", b"\x08\x89\x00", b"\x08\x06"]
    return draw(mutated_frames(draw(commands_around(draw(message_bodies()), 9, wrong_types))))


other_frames = st.sampled_from([commands.ping(), commands.flow(1, 100)])


def streams() -> st.SearchStrategy[tuple[list[bytes], int]]:
    frames = st.one_of(message_frames(), message_frames(), other_frames)
    return socket_streams(frames, [DEFAULT_MAX_FRAME_SIZE] * 8 + [200, 1 << 40])


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_same_message_frames_and_errors_on_generated_streams(
    stream: tuple[list[bytes], int],
) -> None:
    chunks, limit = stream
    reference = outcomes(PyFrameDecoder(limit), chunks, py_of_send)
    compiled = outcomes(_speedups.FrameDecoder(limit), chunks, _speedups.of_send)
    assert compiled == reference


def broker_message(**fields: Any) -> bytes:
    """A MESSAGE frame as a broker writes it: protobuf's canonical layout, with a CRC."""
    command = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
    command.message.consumer_id = fields.get("consumer_id", 3)
    command.message.message_id.ledgerId = fields.get("ledger", 7)
    command.message.message_id.entryId = fields.get("entry", 8)
    for name in ("redelivery_count", "consumer_epoch"):
        if name in fields:
            setattr(command.message, name, fields[name])
    if "partition" in fields:
        command.message.message_id.partition = fields["partition"]
    command.message.ack_set.extend(fields.get("ack_set", []))
    entry = b"\x00\x00\x00\x02\x0a\x00payload"
    body = command.SerializeToString()
    section = (0x0E01).to_bytes(2, "big") + _speedups.crc32c(entry).to_bytes(4, "big") + entry
    return frame_of(body, section)


def test_ordinary_messages_take_the_fast_path() -> None:
    """Frames as a broker writes them never reach the fallback, and read back right."""
    decoder = _speedups.FrameDecoder()
    decoder.feed(
        broker_message()
        + broker_message(consumer_id=U64, ledger=2**63, entry=0, redelivery_count=4)
        + broker_message(partition=-1, consumer_epoch=9)
    )
    frames = list(decoder)
    assert [type(frame.command) for frame in frames] == [_speedups.MessageCommand] * 3
    first, second, third = (frame.command.message for frame in frames)
    assert (first.consumer_id, first.message_id.ledgerId, first.message_id.entryId) == (3, 7, 8)
    assert (first.redelivery_count, first.ack_set, first.HasField("redelivery_count")) == (
        0,
        (),
        False,
    )
    assert (second.consumer_id, second.message_id.ledgerId, second.redelivery_count) == (
        U64,
        2**63,
        4,
    )
    assert third.message_id.partition == -1
    assert third.message_id.HasField("partition")
    assert third.consumer_epoch == 9
    assert all(frame.checksum_valid and frame.has_checksum for frame in frames)
    assert frames[0].entry == b"\x00\x00\x00\x02\x0a\x00payload"


def test_an_ack_set_is_left_to_the_reference() -> None:
    """A partly acknowledged batch (PIP-54) carries an ack set: the parsed command gives it."""
    decoder = _speedups.FrameDecoder()
    decoder.feed(broker_message(ack_set=[5, -1]))
    [frame] = list(decoder)
    assert isinstance(frame.command, pb.BaseCommand)
    assert list(frame.command.message.ack_set) == [5, -1]


def test_a_bad_checksum_is_reported_not_hidden() -> None:
    frame = bytearray(broker_message())
    frame[-1] ^= 0xFF  # the last payload byte
    decoder = _speedups.FrameDecoder()
    decoder.feed(bytes(frame))
    [decoded] = list(decoder)
    assert isinstance(decoded.command, _speedups.MessageCommand)
    assert decoded.has_checksum
    assert not decoded.checksum_valid


def test_the_rest_of_the_protobuf_api_still_answers() -> None:
    decoder = _speedups.FrameDecoder()
    decoder.feed(broker_message(redelivery_count=2))
    [frame] = list(decoder)
    message: Any = frame.command.message
    assert not message.message_id.HasField("batch_size")
    assert list(message.message_id.ack_set) == []  # not a fast field: from the parsed command
    assert not frame.command.HasField("send")
    assert "redelivery_count: 2" in repr(message)
    reference = PyFrameDecoder()
    reference.feed(broker_message(redelivery_count=2))
    parsed = next(reference).command
    assert frame.command == parsed
    assert message == parsed.message
    assert message.message_id == parsed.message.message_id


def test_a_decoded_message_is_freed_without_the_cyclic_collector() -> None:
    """The command, its fields and its id hold no references back to one another: a frame is
    freed when dropped, not left to a collection (a consumer receiving 100k messages a second
    paid ~0.5 us per message in collections for such a cycle). Asked for a field they do not
    hold, each still answers from the command's bytes."""
    gc.collect()
    gc.disable()
    try:
        decoder = _speedups.FrameDecoder()
        decoder.feed(broker_message(redelivery_count=1) * 50)
        frames = list(decoder)
        assert len(frames) == 50
        for frame in frames:
            message: Any = frame.command.message
            assert isinstance(frame.command, _speedups.MessageCommand)
            assert message.redelivery_count == 1
            assert list(message.message_id.ack_set) == []  # parsed from the bytes on use
            assert message.HasField("message_id")
            assert not message.HasField("consumer_epoch")
        del frames, frame, message
        assert gc.collect() == 0
    finally:
        gc.enable()
