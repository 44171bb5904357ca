"""Reading idempotency keys out of stored entries, as 16-byte digests (issues #16, #26).

The broker keeps a window of keys per topic (``broker.publish.idempotency_window``); to keep it
compact and the SEND path fast it holds each key as its BLAKE2b-128 digest (`key_digest`), and
the keys are read with a walk over the protobuf wire bytes rather than a full parse: only the
fields the key check needs are looked at. ``scan_metadata`` reads an entry's ``MessageMetadata``,
``scan_batch`` the record headers of a batch payload. Both return digests, never the key
strings: the window needs no more (one bytes object per key).

This module is the pure-Python reference; ``protocol._speedups`` (``_keys.pxi``) compiles the
same functions and is exported here under the same names when it is in use (``protocol._accel``).
Hypothesis tests (tests/protocol/test_keys*.py) show both give the same answers.

The key of a message is the value of its *first* property named ``magnetar.idempotency-key``; an
empty value means no key. Wire bytes the reference parser (upb) would refuse answer None
("cannot be read": stored as keyless); fields with an unexpected wire type are skipped, as upb
keeps them as unknown fields.
"""

from __future__ import annotations

import hashlib
import struct

from protocol._accel import speedups
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY

__all__ = [
    "DIGEST_SIZE",
    "KeyScanBudget",
    "MetadataScan",
    "key_digest",
    "quick_key",
    "scan_batch",
    "scan_metadata",
]

DIGEST_SIZE = 16
"""BLAKE2b-128: two distinct keys share a digest with probability 2**-128 per pair (module
``broker.publish.idempotency_window`` states the collision rule)."""

KEY_NAME = IDEMPOTENCY_KEY_PROPERTY.encode()

_U32 = struct.Struct(">I")
_U64 = (1 << 64) - 1
_U32_MASK = 0xFFFF_FFFF
# MessageMetadata fields (PulsarApi.proto)
_MD_PROPERTIES = 4
_MD_COMPRESSION = 8
_MD_UNCOMPRESSED_SIZE = 9
_MD_NUM_MESSAGES = 11
_MD_ENCRYPTION_KEYS = 13
_MD_NUM_CHUNKS = 27
_KNOWN_COMPRESSIONS = 5  # CompressionType 0..4; upb keeps another value as an unknown field
# SingleMessageMetadata fields
_SM_PROPERTIES = 1
_SM_PAYLOAD_SIZE = 3


class KeyScanBudget(ValueError):
    """A batch's headers are beyond the bytes or properties the caller allows (the text says)."""


# (metadata size, num_messages_in_batch or -1 when absent, compression, uncompressed_size,
#  the digest of the entry-level key or None); None for chunked or encrypted entries.
MetadataScan = tuple[int, int, int, int, bytes | None]


def key_digest(key: bytes) -> bytes:
    """The 16-byte digest the window keeps for a key (its UTF-8 bytes)."""
    return hashlib.blake2b(key, digest_size=DIGEST_SIZE).digest()


class _Malformed(Exception):
    pass


def _varint(data: bytes, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while position < end:
        byte = data[position]
        position += 1
        if shift == 63:
            if byte > 1:
                raise _Malformed
            return value | (byte << 63), position
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise _Malformed


def _tag(data: bytes, position: int, end: int) -> tuple[int, int, int]:
    start = position
    value, position = _varint(data, position, end)
    if position - start > 5 or value > _U32_MASK or value < 8:
        raise _Malformed
    return value >> 3, value & 7, position


def _length(data: bytes, position: int, end: int) -> tuple[int, int]:
    size, position = _varint(data, position, end)
    if size > end - position:
        raise _Malformed
    return size, position


def _skip(data: bytes, position: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, position, end)[1]
    if wire == 1 or wire == 5:
        width = 8 if wire == 1 else 4
        if end - position < width:
            raise _Malformed
        return position + width
    if wire == 2:
        size, position = _length(data, position, end)
        return position + size
    raise _Malformed


def _int32(value: int) -> int:
    value &= _U32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def _key_value(data: bytes, position: int, end: int) -> tuple[bytes, bytes]:
    """A KeyValue's (key, value): the last occurrence of each, as upb keeps them."""
    key = value = b""
    while position < end:
        field, wire, position = _tag(data, position, end)
        if wire == 2 and (field == 1 or field == 2):
            size, position = _length(data, position, end)
            if field == 1:
                key = data[position : position + size]
            else:
                value = data[position : position + size]
            position += size
        else:
            position = _skip(data, position, end, wire)
    return key, value


class _Properties:
    """What a header's properties say about the key: the first key property's value."""

    __slots__ = ("count", "found", "value")

    def __init__(self) -> None:
        self.count = 0
        self.found = False
        self.value = b""

    def add(self, data: bytes, position: int, end: int) -> None:
        self.count += 1
        key, value = _key_value(data, position, end)
        if not self.found and key == KEY_NAME:
            self.found = True
            self.value = value

    def digest(self) -> bytes | None:
        return key_digest(self.value) if self.value else None


def scan_metadata(entry: bytes, max_properties: int) -> MetadataScan | None:
    """What the key check needs from ``entry``'s ``MessageMetadata``; None for an entry too short
    or malformed, chunked (``num_chunks_from_msg > 1``) or encrypted: stored as keyless.

    Raises:
        KeyScanBudget: the metadata holds a key property and more than ``max_properties``
            properties.
    """
    if len(entry) < 4:
        return None
    (size,) = _U32.unpack_from(entry, 0)
    end = 4 + size
    if end > len(entry):
        return None
    num_messages = -1
    compression = uncompressed = chunks = 0
    encrypted = False
    properties = _Properties()
    position = 4
    try:
        while position < end:
            field, wire, position = _tag(entry, position, end)
            if wire == 2 and field in (_MD_PROPERTIES, _MD_ENCRYPTION_KEYS):
                length, position = _length(entry, position, end)
                if field == _MD_PROPERTIES:
                    properties.add(entry, position, position + length)
                else:
                    encrypted = True
                position += length
            elif wire == 0 and field in (
                _MD_COMPRESSION,
                _MD_UNCOMPRESSED_SIZE,
                _MD_NUM_MESSAGES,
                _MD_NUM_CHUNKS,
            ):
                value, position = _varint(entry, position, end)
                if field == _MD_COMPRESSION:
                    if value < _KNOWN_COMPRESSIONS:
                        compression = value
                elif field == _MD_UNCOMPRESSED_SIZE:
                    uncompressed = value & _U32_MASK
                elif field == _MD_NUM_MESSAGES:
                    num_messages = _int32(value)
                else:
                    chunks = _int32(value)
            else:
                position = _skip(entry, position, end, wire)
    except _Malformed:
        return None
    if chunks > 1 or encrypted:
        return None
    if properties.found and properties.count > max_properties:
        raise KeyScanBudget(f"more than {max_properties} properties to look through for keys")
    return size, num_messages, compression, uncompressed, properties.digest()


def scan_batch(
    payload: bytes, count: int, header_budget: int, max_properties: int
) -> list[bytes | None] | None:
    """The key digest of each of the ``count`` records of a batch payload (None for a keyless
    record); None when the payload is not exactly ``count`` well-formed records.

    Raises:
        KeyScanBudget: the record headers exceed ``header_budget`` bytes, or the headers that
            hold a key property hold more than ``max_properties`` properties in all.
    """
    keys: list[bytes | None] = []
    position, end = 0, len(payload)
    walked = 0
    while position < end:
        if end - position < 4 or len(keys) == count:
            return None
        (header_size,) = _U32.unpack_from(payload, position)
        header_budget -= header_size
        if header_budget < 0:
            raise KeyScanBudget("batch record headers above the metadata bytes the key check reads")
        start, header_end = position + 4, position + 4 + header_size
        if header_end > end:
            return None
        try:
            payload_size, properties = _single_metadata(payload, start, header_end)
        except _Malformed:
            return None
        if payload_size < 0:
            return None
        if properties.found:
            walked += properties.count
            if walked > max_properties:
                raise KeyScanBudget(
                    f"more than {max_properties} properties to look through for keys"
                )
        keys.append(properties.digest())
        position = header_end + payload_size
    return keys if position == end and len(keys) == count else None


def _single_metadata(data: bytes, position: int, end: int) -> tuple[int, _Properties]:
    """A record header's payload size (-1 when absent) and properties."""
    payload_size = -1
    properties = _Properties()
    while position < end:
        field, wire, position = _tag(data, position, end)
        if wire == 2 and field == _SM_PROPERTIES:
            length, position = _length(data, position, end)
            properties.add(data, position, position + length)
            position += length
        elif wire == 0 and field == _SM_PAYLOAD_SIZE:
            value, position = _varint(data, position, end)
            payload_size = _int32(value)
        else:
            position = _skip(data, position, end, wire)
    return payload_size, properties


def quick_key(entry: bytes, max_header_bytes: int, max_properties: int) -> bytes | bool | None:
    """The SEND path's first look (one call for the common cases): False for an entry with no
    key to read (the key's name occurs nowhere and the metadata has no ``compression`` tag
    byte); the key's digest for a single (non-batched) message that carries one, within the
    bounds; None for everything else, which the caller reads with the full check
    (``broker.publish.idempotency_keys.entry_keys``), bounds and errors included."""
    if len(entry) < 4:
        return False
    (size,) = _U32.unpack_from(entry, 0)
    if KEY_NAME not in entry:
        return False if entry.find(b"\x40", 4, 4 + size) < 0 else None
    if size > max_header_bytes:
        return None
    try:
        scanned = scan_metadata(entry, max_properties)
    except KeyScanBudget:
        return None
    if scanned is None or scanned[1] >= 0 or scanned[4] is None:
        return None
    return scanned[4]


py_key_digest = key_digest
py_quick_key = quick_key
py_scan_metadata = scan_metadata
py_scan_batch = scan_batch

_compiled = speedups()
if _compiled is not None and hasattr(_compiled, "scan_key_metadata"):
    key_digest = _compiled.key_digest
    scan_metadata = _compiled.scan_key_metadata
    scan_batch = _compiled.scan_key_batch
    quick_key = _compiled.quick_key
