"""Reading the idempotency keys of an entry (issue #16), for the publish path and the replay.

A non-batched message carries the key in ``MessageMetadata.properties``; the messages of a batch
in their ``SingleMessageMetadata.properties``. An entry that does not contain the property name
anywhere and whose metadata has no ``compression`` field is answered without parsing (the
common case costs two substring searches); a compressed batch is decompressed to read the
per-message metadata.

Not read (stored as if keyless, documented): chunked messages (PIP-37: a key check per chunk
would store orphan chunks), and encrypted batches (the broker cannot open them).
"""

from __future__ import annotations

import struct
import threading

from protocol._pb import PulsarApi_pb2 as pb
from protocol.batch import split_batch
from protocol.compression import CompressionError
from protocol.compression import decode as decompress
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY, CompressionType
from protocol.errors import RemoteProtocolError

__all__ = ["EntryKeys", "entry_keys"]

_KEY_BYTES = IDEMPOTENCY_KEY_PROPERTY.encode()
_U32 = struct.Struct(">I")
_NONE = CompressionType.NONE
_COMPRESSION_TAG = b"\x40"  # MessageMetadata.compression: field 8, varint


class EntryKeys:
    """The keys of one entry's messages, in batch order (None for a message without one)."""

    __slots__ = ("is_batch", "keys")

    def __init__(self, keys: list[str | None], is_batch: bool) -> None:
        self.keys = keys
        self.is_batch = is_batch


def entry_keys(entry: bytes) -> EntryKeys | None:
    """The keys of ``entry``, or None when no message of it carries one (or cannot be read)."""
    has_name = _KEY_BYTES in entry
    if len(entry) < 4:
        return None
    (size,) = _U32.unpack_from(entry, 0)
    if not has_name and entry.find(_COMPRESSION_TAG, 4, 4 + size) < 0:
        # No key in clear and no ``compression`` field (its tag byte would be there): a keyless
        # entry, answered without parsing (the tag byte may also occur inside other fields'
        # bytes; then the parse below decides).
        return None
    md = _metadata()
    try:
        md.ParseFromString(entry[4 : 4 + size])
    except Exception:  # upb DecodeError: the publish path validated it; the replay skips it
        return None
    if md.num_chunks_from_msg > 1 or md.encryption_keys:
        return None
    if not md.HasField("num_messages_in_batch"):
        if not has_name:
            return None
        key = _key_of(md.properties)
        return None if key is None else EntryKeys([key], is_batch=False)
    compressed = int(md.compression) != _NONE
    if not has_name and not compressed:
        return None
    payload: bytes = entry[4 + size :]
    try:
        if compressed:
            payload = decompress(md.compression, payload, md.uncompressed_size)
            if _KEY_BYTES not in payload:
                return None
        records = split_batch(payload, md.num_messages_in_batch)
    except (CompressionError, RemoteProtocolError):
        return None
    keys = [_key_of(meta.properties) for meta, _data in records]
    if all(key is None for key in keys):
        return None
    return EntryKeys(keys, is_batch=True)


_PER_THREAD = threading.local()


def _metadata() -> pb.MessageMetadata:
    """One reused message per thread (publish path on the loop, replays in loader threads):
    parsing into it saves an allocation per entry (``ParseFromString`` clears it first)."""
    try:
        md: pb.MessageMetadata = _PER_THREAD.metadata
    except AttributeError:
        md = _PER_THREAD.metadata = pb.MessageMetadata()
    return md


def _key_of(properties: object) -> str | None:
    for kv in properties:  # type: ignore[attr-defined]  # repeated KeyValue
        if kv.key == IDEMPOTENCY_KEY_PROPERTY:
            value = kv.value
            return value if value.__class__ is str and value else None
    return None
