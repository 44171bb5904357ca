"""SEND_RECEIPT frames to and from bytes, without a protobuf message per receipt. No I/O.

A receipt is the broker's most frequent frame (one per stored entry), and building it through
``commands.send_receipt`` costs two message objects, four field stores and a serialisation.
Its encoding is fixed by the schema, so this module writes the same bytes directly: the
producer-id field is encoded once per producer (``ReceiptEncoder``), the ledger-id field once
per ledger, and only the sequence ids and the entry id are encoded per receipt.

Reading is the mirror image, for a sender that cannot afford a ``BaseCommand`` parse per
receipt (several microseconds each; the perf tool pushes 150k+ entries/s): ``parse_receipt``
recognises exactly this layout with a small varint loop, and ``ReceiptReader`` splits a byte
stream into frames, reading receipts that way and handing every other frame (another command,
fields in another order, an unknown field, trailing bytes) to ``FrameDecoder``. The fast path
only ever accepts what it fully understood: "not recognised" is never "wrong".

Layout (proto2 fields in field-number order, as upb writes them; ``tests/protocol/
test_receipts.py`` checks byte equality with ``commands.send_receipt`` over random values, and
that both readers give back what was written)::

    [totalSize][commandSize]
    BaseCommand:  08 07                     type = SEND_RECEIPT
                  3a <len> CommandSendReceipt:
                      08 <producer_id>     10 <sequence_id>
                      1a <len> MessageIdData: 08 <ledgerId> 10 <entryId>
                      20 <highest_sequence_id>

Every id is written as its uint64 wire form (``-1`` -> ``2**64 - 1``), as ``send_receipt`` does,
and read back as the signed value the codec's callers see (``protocol.ids.from_u64``).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from protocol._accel import speedups
from protocol.framing import Frame, FrameDecoder
from protocol.ids import from_u64

__all__ = [
    "Receipt",
    "ReceiptEncoder",
    "ReceiptReader",
    "SendOutcome",
    "encode_varint",
    "parse_receipt",
    "py_take_settled_receipts",
    "receipt_of",
    "take_settled_receipts",
]

_U64_MASK = (1 << 64) - 1
_FRAME_HEADER = struct.Struct(">II").pack
_U32 = struct.Struct(">I")
_RECEIPT_PREFIX = b"\x08\x07\x3a"  # BaseCommand.type = SEND_RECEIPT, then send_receipt's tag
# Varints from tables, kept small (64 KiB: an idle broker's RSS is a goal too). One-byte
# varints are CPython's cached one-byte objects; two-byte ones (128..16383) are slices of a blob.
_ONE: tuple[bytes, ...] = tuple(bytes((v,)) for v in range(0x80))


def _two_byte_table(continued: bool) -> bytes:
    """``value & 0x7F | 0x80, value >> 7`` for every 14-bit value (second byte with the
    continuation bit too when ``continued``), written in place: no object per value."""
    table = bytearray(2 << 14)
    table[0::2] = bytes(range(0x80, 0x100)) * (1 << 7)
    table[1::2] = bytes(v | (0x80 if continued else 0) for v in range(0x80) for _ in range(0x80))
    return bytes(table)


_TWO = _two_byte_table(continued=False)
# The low 14 bits of a larger value: two bytes, both with the continuation bit. A 3- or 4-byte
# varint (the sequence and entry ids of a busy topic) is then one slice and one lookup.
_LOW14 = _two_byte_table(continued=True)


def encode_varint(value: int) -> bytes:
    """The protobuf varint of an unsigned ``value`` (negative values as their uint64 form)."""
    if 0 <= value < 0x80:
        return _ONE[value]
    if 0 < value < 1 << 14:
        at = value << 1
        return _TWO[at : at + 2]
    if 0 < value < 1 << 28:
        at = (value & 0x3FFF) << 1
        high = value >> 14
        if high < 0x80:
            return _LOW14[at : at + 2] + _ONE[high]
        return _LOW14[at : at + 2] + _TWO[high << 1 : (high << 1) + 2]
    value &= _U64_MASK
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class PyReceiptEncoder:
    """SEND_RECEIPT frames of one producer id (one per producer on a connection).

    The reference; ``ReceiptEncoder`` (below) is the compiled one when built.
    """

    __slots__ = ("_ledger_id", "_ledger_part", "_producer_part")

    def __init__(self, producer_id: int) -> None:
        self._producer_part = b"\x08" + encode_varint(producer_id)
        self._ledger_id: int | None = None
        self._ledger_part = b""

    def receipt(
        self, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int
    ) -> bytes:
        """The whole frame, equal to ``commands.send_receipt(producer_id, sequence_id,
        MessageId(ledger_id, entry_id), highest_sequence_id)``."""
        if ledger_id != self._ledger_id:
            self._ledger_part = b"\x08" + encode_varint(ledger_id)
            self._ledger_id = ledger_id
        message_id = self._ledger_part + b"\x10" + encode_varint(entry_id)
        sequence = encode_varint(sequence_id)
        # Unbatched, the highest id is the sequence id: encoded once.
        highest = (
            sequence if highest_sequence_id == sequence_id else encode_varint(highest_sequence_id)
        )
        sub = b"".join(
            (
                self._producer_part,
                b"\x10",
                sequence,
                b"\x1a",
                _ONE[len(message_id)],  # at most 22 bytes
                message_id,
                b"\x20",
                highest,
            )
        )
        size = len(sub)
        length = _ONE[size]  # at most 2 + 11 + 11 + 24 + 11 bytes: one varint byte
        body_size = 3 + len(length) + size
        return b"".join((_FRAME_HEADER(body_size + 4, body_size), _RECEIPT_PREFIX, length, sub))


class SendOutcome(Protocol):
    """What the receipts of a settled run read of a SEND's outcome (the broker's
    ``PublishOutcome``): settled (``done``), where it is durable (a ``(ledger_id, entry_id)``
    tuple; None: a duplicate), and whether it failed."""

    @property
    def done(self) -> bool: ...
    @property
    def position(self) -> tuple[int, int] | None: ...
    @property
    def error(self) -> BaseException | None: ...


_Outcome = TypeVar("_Outcome", bound=SendOutcome)


def py_take_settled_receipts(
    producer_id: int, pending: deque[tuple[int, int, _Outcome]]
) -> tuple[bytes, int]:
    """The SEND_RECEIPT frames, in one buffer, of the settled prefix of ``pending`` (a
    producer's ``(sequence_id, highest_sequence_id, outcome)`` in SEND order), and how many;
    those entries are popped. Stops at the first outcome not settled or settled with an error
    (its SEND_ERROR is the caller's). A duplicate (no position) is answered ``-1:-1``."""
    encoder = PyReceiptEncoder(producer_id)
    frames: list[bytes] = []
    while pending:
        sequence_id, highest_sequence_id, outcome = pending[0]
        if not outcome.done or outcome.error is not None:
            break
        pending.popleft()
        position = outcome.position
        ledger_id, entry_id = (-1, -1) if position is None else position
        frames.append(encoder.receipt(sequence_id, ledger_id, entry_id, highest_sequence_id))
    return b"".join(frames), len(frames)


_speedups = speedups()
if TYPE_CHECKING:
    ReceiptEncoder = PyReceiptEncoder
    take_settled_receipts = py_take_settled_receipts
elif _speedups is not None:
    ReceiptEncoder = _speedups.ReceiptEncoder
    take_settled_receipts = _speedups.take_settled_receipts
else:
    ReceiptEncoder = PyReceiptEncoder
    take_settled_receipts = py_take_settled_receipts


# --- reading ---------------------------------------------------------------------------------


class Receipt(NamedTuple):
    """The fields of a SEND_RECEIPT a sender needs (signed, as the codec's callers see them)."""

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


def _decode_varint(data: bytearray | bytes, position: int, end: int) -> tuple[int, int]:
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
    length, position = _decode_varint(data, start + 7, end)
    if position + length != end or data[position] != 0x08:
        return None
    producer_id, position = _decode_varint(data, position + 1, end)
    if data[position] != 0x10:
        return None
    sequence_id, position = _decode_varint(data, position + 1, end)
    if data[position] != 0x1A:
        return None
    id_length, position = _decode_varint(data, position + 1, end)
    id_end = position + id_length
    if id_end > end or data[position] != 0x08:
        return None
    ledger_id, position = _decode_varint(data, position + 1, id_end)
    if data[position] != 0x10:
        return None
    entry_id, position = _decode_varint(data, position + 1, id_end)
    if position != id_end:  # partition / batch index / ack set: not a plain receipt
        return None
    highest: int | None = None
    if id_end < end:
        if data[id_end] != 0x20:
            return None
        highest, position = _decode_varint(data, id_end + 1, end)
        if position != end:
            return None
        highest = from_u64(highest)
    return Receipt(
        from_u64(producer_id),
        from_u64(sequence_id),
        from_u64(ledger_id),
        from_u64(entry_id),
        highest,
    )


def receipt_of(frame: Frame) -> Receipt | None:
    """The same ``Receipt`` taken from a fully decoded frame (None for other commands)."""
    if frame.type != frame.command.SEND_RECEIPT:
        return None
    receipt = frame.command.send_receipt
    message_id = receipt.message_id
    return Receipt(
        from_u64(receipt.producer_id),
        from_u64(receipt.sequence_id),
        from_u64(message_id.ledgerId),
        from_u64(message_id.entryId),
        from_u64(receipt.highest_sequence_id) if receipt.HasField("highest_sequence_id") else None,
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
