"""SEND_RECEIPT frames built from bytes, without a protobuf message per receipt. No I/O.

A receipt is the broker's most frequent frame (one per stored entry), and building it through
``commands.send_receipt`` costs two message objects, four field stores and a serialisation.
Its encoding is fixed by the schema, so this module writes the same bytes directly: the
producer-id field is encoded once per producer (``ReceiptEncoder``), the ledger-id field once
per ledger, and only the sequence ids and the entry id are encoded per receipt.

Layout (proto2 fields in field-number order, as upb writes them; ``tests/protocol/
test_receipts.py`` checks byte equality with ``commands.send_receipt`` over random values)::

    [totalSize][commandSize]
    BaseCommand:  08 07                     type = SEND_RECEIPT
                  3a <len> CommandSendReceipt:
                      08 <producer_id>     10 <sequence_id>
                      1a <len> MessageIdData: 08 <ledgerId> 10 <entryId>
                      20 <highest_sequence_id>

Every id is written as its uint64 wire form (``-1`` -> ``2**64 - 1``), as ``send_receipt`` does.
"""

from __future__ import annotations

import struct

__all__ = ["ReceiptEncoder", "encode_varint"]

_U64_MASK = (1 << 64) - 1
_FRAME_HEADER = struct.Struct(">II").pack
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


class ReceiptEncoder:
    """SEND_RECEIPT frames of one producer id (one per producer on a connection)."""

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
        return b"".join((_FRAME_HEADER(body_size + 4, body_size), b"\x08\x07\x3a", length, sub))
