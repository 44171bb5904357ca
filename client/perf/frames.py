"""Pre-encoded SEND frames for the raw pipelined generator.

Every SEND must carry its own sequence id (with dedup on, a repeated id is dropped), so frames
cannot simply be copied. Unbatched frames are built once with the real codec
(``protocol.commands.send``) and then *patched*: sequence ids start at ``SEQUENCE_BASE`` = 2**28,
where every id up to 2**35 is a 5-byte varint, so the id's bytes sit at two fixed offsets (the
SEND command and the entry's ``MessageMetadata``) and only those 10 bytes and the CRC-32C of the
entry change from one frame to the next (about a microsecond per frame, against several for a
protobuf encode). Batched entries are encoded with ``client.batching.BatchBuilder`` (one encode
per batch of messages is cheap next to the batch itself).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from crc32c import crc32c

from client.batching import BatchBuilder, OutgoingMessage
from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.metadata import encode_entry

#: First sequence id of a raw producer: ids in [2**28, 2**35) are all 5-byte varints.
SEQUENCE_BASE = 1 << 28
_SEQUENCE_END = 1 << 35
_U32 = struct.Struct(">I")
# A probe id whose varint bytes cannot appear by chance in the frame's other fields.
_PROBE = SEQUENCE_BASE + 0x5A5A5A5


def varint5(value: int) -> bytes:
    """``value`` (in [2**28, 2**35)) as a 5-byte protobuf varint."""
    if not SEQUENCE_BASE <= value < _SEQUENCE_END:
        raise ValueError(f"sequence id {value} is not a 5-byte varint")
    return _varint5(value)


def _varint5(value: int) -> bytes:
    # Unrolled: this runs once per frame on the generator's hot path.
    return bytes(
        (
            (value & 0x7F) | 0x80,
            ((value >> 7) & 0x7F) | 0x80,
            ((value >> 14) & 0x7F) | 0x80,
            ((value >> 21) & 0x7F) | 0x80,
            value >> 28,
        )
    )


@dataclass(frozen=True, slots=True)
class EntryShape:
    """What every entry of a run looks like."""

    producer_id: int
    producer_name: str
    payload: bytes
    batch_messages: int  # 1 = unbatched


class SendFrames:
    """Encodes the SEND frames of one producer, in sequence-id order."""

    def __init__(self, shape: EntryShape) -> None:
        self.shape = shape
        self.next_sequence_id = SEQUENCE_BASE
        if shape.batch_messages == 1:
            self._template, self._id_offsets, self._crc_offset = self._unbatched_template()

    def _unbatched_template(self) -> tuple[bytes, tuple[int, int], int]:
        shape = self.shape
        metadata = pb.MessageMetadata(
            producer_name=shape.producer_name,
            sequence_id=_PROBE,
            publish_time=int(time.time() * 1000),
        )
        frame = commands.send(shape.producer_id, _PROBE, encode_entry(metadata, shape.payload))
        probe = varint5(_PROBE)
        first = frame.find(probe)
        second = frame.find(probe, first + 1)
        if first < 0 or second < 0 or frame.find(probe, second + 1) >= 0:
            raise AssertionError("cannot locate the sequence id in the SEND template")
        (command_size,) = _U32.unpack_from(frame, 4)
        crc_offset = 8 + command_size + 2  # after the 0x0e01 magic
        return frame, (first, second), crc_offset

    def take(self, entries: int) -> bytes:
        """The next ``entries`` SEND frames, joined (one ``transport.write``)."""
        if self.shape.batch_messages == 1:
            return self._take_unbatched(entries)
        return b"".join(self._batch_frame() for _ in range(entries))

    def _take_unbatched(self, entries: int) -> bytes:
        template = self._template
        size = len(template)
        first, second = self._id_offsets
        crc_offset = self._crc_offset
        entry_offset = crc_offset + 4
        block = bytearray(template * entries)
        view = memoryview(block)
        sequence_id = self.next_sequence_id
        pack_into = _U32.pack_into
        encode = _varint5
        if sequence_id + entries > _SEQUENCE_END:
            raise ValueError("sequence ids exhausted")
        for base in range(0, size * entries, size):
            encoded = encode(sequence_id)
            block[base + first : base + first + 5] = encoded
            block[base + second : base + second + 5] = encoded
            pack_into(block, base + crc_offset, crc32c(view[base + entry_offset : base + size]))
            sequence_id += 1
        view.release()
        self.next_sequence_id = sequence_id
        return bytes(block)

    def _batch_frame(self) -> bytes:
        shape = self.shape
        builder = BatchBuilder(max_messages=shape.batch_messages, max_bytes=1 << 30)
        now = int(time.time() * 1000)
        first = self.next_sequence_id
        for sequence_id in range(first, first + shape.batch_messages):
            builder.add(OutgoingMessage(shape.payload, sequence_id), now)
        self.next_sequence_id = first + shape.batch_messages
        return builder.build(producer_name=shape.producer_name).send(shape.producer_id)


class EncodedRun:
    """All the SEND frames of one producer for a counted run, encoded before the clock starts.

    ``block(start, count)`` is a zero-copy view of frames ``start .. start+count-1``.
    """

    __slots__ = ("_data", "_offsets", "entries")

    def __init__(self, frames: SendFrames, entries: int) -> None:
        self.entries = entries
        if frames.shape.batch_messages == 1:
            self._data = memoryview(frames.take(entries))
            size = len(self._data) // entries if entries else 0
            self._offsets: list[int] | range = range(0, size * (entries + 1), size or 1)
        else:
            pieces = [frames.take(1) for _ in range(entries)]
            offsets = [0]
            for piece in pieces:
                offsets.append(offsets[-1] + len(piece))
            self._data = memoryview(b"".join(pieces))
            self._offsets = offsets

    def block(self, start: int, count: int) -> memoryview:
        return self._data[self._offsets[start] : self._offsets[start + count]]
