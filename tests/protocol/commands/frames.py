"""Decoding helpers shared by the tests of ``protocol.commands``: one frame, its sub-command."""

from __future__ import annotations

from typing import Any

from protocol import pb
from protocol.framing import SUB_MESSAGE_NAME, Frame, FrameDecoder
from protocol.metadata import encode_entry

T = pb.BaseCommand
U64_MINUS_ONE = 2**64 - 1


def decode_one(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.feed(data)
    frames = list(decoder)
    assert len(frames) == 1
    assert decoder.buffered == 0
    return frames[0]


def sub(data: bytes, expected_type: int) -> Any:
    """Decode one frame of ``expected_type`` and return its sub-command (typed loosely)."""
    frame = decode_one(data)
    assert frame.type == expected_type
    return getattr(frame.command, SUB_MESSAGE_NAME[expected_type])


def entry() -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=5)
    return encode_entry(metadata, b"body")
