"""Property tests of the frame decoder (hypothesis)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import commands, pb
from protocol.errors import ProtocolError
from protocol.framing import Frame, FrameDecoder
from protocol.ids import MessageId
from protocol.metadata import encode_entry

T = pb.BaseCommand
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _entry(payload: bytes, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="prop", sequence_id=sequence_id, publish_time=7)
    return encode_entry(metadata, payload)


ids = st.integers(min_value=0, max_value=2**63 - 1)
frames = st.one_of(
    st.builds(lambda: commands.ping()),
    st.builds(commands.flow, ids, st.integers(min_value=0, max_value=2**32 - 1)),
    st.builds(commands.error, ids, st.integers(0, 25), st.text(max_size=30)),
    st.builds(
        lambda p, s, payload: commands.send(p, s, _entry(payload, s)),
        ids,
        ids,
        st.binary(max_size=300),
    ),
    st.builds(
        lambda c, ledger, entry, payload: commands.message(
            c, MessageId(ledger, entry), _entry(payload, 0)
        ),
        ids,
        ids,
        ids,
        st.binary(max_size=300),
    ),
)


def _key(frame: Frame) -> tuple[bytes, bytes | None, bool, bool]:
    return (
        frame.command.SerializeToString(),
        frame.entry,
        frame.has_checksum,
        frame.checksum_valid,
    )


def _decode_in_chunks(data: bytes, cuts: list[int]) -> list[Frame]:
    decoder = FrameDecoder()
    decoded: list[Frame] = []
    previous = 0
    for cut in [*sorted(cuts), len(data)]:
        decoder.feed(data[previous:cut])
        decoded.extend(decoder)
        previous = cut
    assert decoder.buffered == 0
    return decoded


@PROPERTY_SETTINGS
@given(st.lists(frames, min_size=1, max_size=6), st.data())
def test_any_split_yields_the_same_frames(stream: list[bytes], data: st.DataObject) -> None:
    joined = b"".join(stream)
    cuts = data.draw(st.lists(st.integers(0, len(joined)), max_size=12))
    whole = _decode_in_chunks(joined, [])
    split = _decode_in_chunks(joined, cuts)
    assert len(whole) == len(stream)
    assert [_key(f) for f in split] == [_key(f) for f in whole]


@PROPERTY_SETTINGS
@given(st.binary(max_size=200), st.lists(frames, max_size=2))
def test_arbitrary_bytes_never_raise_anything_but_protocol_error(
    garbage: bytes, prefix: list[bytes]
) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(b"".join(prefix) + garbage)
    try:
        for frame in decoder:
            assert isinstance(frame, Frame)
    except ProtocolError:
        pass


@PROPERTY_SETTINGS
@given(st.binary(min_size=8, max_size=64))
def test_arbitrary_frame_bodies_never_raise_anything_but_protocol_error(body: bytes) -> None:
    # A well-formed length prefix around random content exercises the command/payload parsing.
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", len(body)) + body)
    try:
        list(decoder)
    except ProtocolError:
        pass


@PROPERTY_SETTINGS
@given(st.integers(min_value=4096 + 1, max_value=2**32 - 1))
def test_oversized_length_rejected_after_four_bytes(declared: int) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(struct.pack(">I", declared))
    try:
        next(decoder)
    except ProtocolError:
        assert decoder.buffered == 4  # nothing was allocated or awaited for the body
    else:
        raise AssertionError("oversized frame accepted")


@PROPERTY_SETTINGS
@given(st.binary(min_size=1, max_size=200), st.data())
def test_flipped_bit_in_entry_is_a_checksum_failure(payload: bytes, data: st.DataObject) -> None:
    entry = _entry(payload, 3)
    frame = bytearray(commands.send(1, 3, entry))
    entry_start = len(frame) - len(entry)
    # Flip inside metadata or payload (not the metadata size, which would change the framing).
    position = data.draw(st.integers(entry_start + 4, len(frame) - 1))
    frame[position] ^= 1 << data.draw(st.integers(0, 7))
    decoder = FrameDecoder()
    decoder.feed(bytes(frame))
    [decoded] = list(decoder)
    assert decoded.has_checksum
    assert not decoded.checksum_valid


@PROPERTY_SETTINGS
@given(st.lists(frames, min_size=1, max_size=3), st.data())
def test_corrupted_valid_streams_never_raise_anything_but_protocol_error(
    stream: list[bytes], data: st.DataObject
) -> None:
    corrupted = bytearray(b"".join(stream))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(corrupted) - 1))
        corrupted[position] = data.draw(st.integers(0, 255))
    decoder = FrameDecoder(max_frame_size=8192)
    decoder.feed(bytes(corrupted))
    try:
        for frame in decoder:
            assert frame.type in pb.BaseCommand.Type.values()
    except ProtocolError:
        pass
