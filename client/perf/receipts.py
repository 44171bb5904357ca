"""Counting SEND_RECEIPTs from their bytes, without building protobuf objects.

A load generator that pushes 150k+ entries/s cannot afford a ``BaseCommand`` parse per receipt
(several microseconds each). Every broker encodes a receipt the same way, because protobuf
writes fields in field-number order:

    [totalSize u32][commandSize u32]
    08 07                     BaseCommand.type = SEND_RECEIPT (field 1, varint 7)
    3a <len>                  BaseCommand.send_receipt (field 7, length-delimited)
      08 <varint>             producer_id (field 1)
      10 <varint>             sequence_id (field 2)
      1a <len> 08 <v> 10 <v>  message_id: ledgerId, entryId (then any optional fields)
      [20 <varint>]           highest_sequence_id (field 4, optional)

So the first bytes after the two sizes (``08 07 3a``) identify the frame, and the three ids are
read with a small varint loop. Anything that does not follow this exact shape (another command,
a field in another order, an unknown field, trailing bytes) is handed to the real codec
(``protocol.framing.FrameDecoder``): the fast path only ever accepts what it fully understood,
and ``tests/client/perf/test_receipts.py`` checks it against the codec on generated receipts.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.framing import Frame, FrameDecoder

_U32 = struct.Struct(">I")
_RECEIPT_PREFIX = b"\x08\x07\x3a"
_U64 = 1 << 64
_I64_LIMIT = 1 << 63


class Receipt(NamedTuple):
    """The fields of a SEND_RECEIPT a generator needs (signed, as the codec's callers see them)."""

    producer_id: int
    sequence_id: int
    ledger_id: int
    entry_id: int
    highest_sequence_id: int | None

    @property
    def is_duplicate(self) -> bool:
        """PIP-6: a duplicate is acknowledged with message id (-1, -1)."""
        return self.ledger_id == -1 and self.entry_id == -1


class _Unexpected(Exception):
    """The bytes are not a receipt of the expected shape: use the codec."""


def _varint(data: bytearray | bytes, position: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while position < end:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            break
    raise _Unexpected


def _signed(value: int) -> int:
    return value - _U64 if value >= _I64_LIMIT else value


def parse_receipt(data: bytearray | bytes, start: int, end: int) -> Receipt | None:
    """The receipt in ``data[start:end]`` (one frame after its totalSize), None if not one.

    None means "not recognised", never "wrong": the caller decodes the frame with the codec.
    """
    try:
        return _parse_receipt(data, start, end)
    except (_Unexpected, IndexError):
        return None


def _parse_receipt(data: bytearray | bytes, start: int, end: int) -> Receipt | None:
    if end - start < 7 or data[start + 4 : start + 7] != _RECEIPT_PREFIX:
        return None
    (command_size,) = _U32.unpack_from(data, start)
    if command_size + 4 != end - start:
        return None
    length, position = _varint(data, start + 7, end)
    if position + length != end or data[position] != 0x08:
        return None
    producer_id, position = _varint(data, position + 1, end)
    if data[position] != 0x10:
        return None
    sequence_id, position = _varint(data, position + 1, end)
    if data[position] != 0x1A:
        return None
    id_length, position = _varint(data, position + 1, end)
    id_end = position + id_length
    if id_end > end or data[position] != 0x08:
        return None
    ledger_id, position = _varint(data, position + 1, id_end)
    if data[position] != 0x10:
        return None
    entry_id, position = _varint(data, position + 1, id_end)
    if position != id_end:  # partition / batch index / ack set: not a plain receipt
        return None
    highest: int | None = None
    if id_end < end:
        if data[id_end] != 0x20:
            return None
        highest, position = _varint(data, id_end + 1, end)
        if position != end:
            return None
        highest = _signed(highest)
    return Receipt(
        _signed(producer_id), _signed(sequence_id), _signed(ledger_id), _signed(entry_id), highest
    )


def receipt_of(frame: Frame) -> Receipt | None:
    """The same ``Receipt`` taken from a fully decoded frame (None for other commands)."""
    if frame.type != frame.command.SEND_RECEIPT:
        return None
    receipt = frame.command.send_receipt
    message_id = receipt.message_id
    return Receipt(
        _signed(receipt.producer_id),
        _signed(receipt.sequence_id),
        _signed(message_id.ledgerId),
        _signed(message_id.entryId),
        _signed(receipt.highest_sequence_id) if receipt.HasField("highest_sequence_id") else None,
    )


class ReceiptReader:
    """Splits received bytes into frames; receipts take the fast path, the rest the codec.

    ``fast`` and ``decoded`` count the frames each path handled (a run that shows many
    ``decoded`` receipts is measuring the codec, not the fast path).
    """

    __slots__ = ("_buffer", "decoded", "fast")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.fast = 0
        self.decoded = 0

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[list[Receipt], list[Frame]]:
        """Receipts and other frames completed by ``data``, in arrival order within each list."""
        buffer = self._buffer
        buffer += data
        receipts: list[Receipt] = []
        others: list[Frame] = []
        position = 0
        available = len(buffer)
        while available - position >= 4:
            (total,) = _U32.unpack_from(buffer, position)
            end = position + 4 + total
            if end > available:
                break
            receipt = parse_receipt(buffer, position + 4, end)
            if receipt is None:
                self._decode(bytes(buffer[position:end]), receipts, others)
            else:
                self.fast += 1
                receipts.append(receipt)
            position = end
        del buffer[:position]
        return receipts, others

    def _decode(self, frame_bytes: bytes, receipts: list[Receipt], others: list[Frame]) -> None:
        decoder = FrameDecoder()
        decoder.feed(frame_bytes)
        for frame in decoder:
            self.decoded += 1
            receipt = receipt_of(frame)
            if receipt is None:
                others.append(frame)
            else:
                receipts.append(receipt)
