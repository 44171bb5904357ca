"""Reading the idempotency keys of an entry (issue #16), for the publish path and the replay.

A non-batched message carries the key in ``MessageMetadata.properties``; the messages of a batch
in their ``SingleMessageMetadata.properties``. An entry that does not contain the property name
anywhere and whose metadata has no ``compression`` field is answered without parsing (the
common case costs two substring searches); a compressed batch is decompressed to read the
per-message metadata.

The work per entry is bounded, because the publish path runs this on the event loop (issue
#24): a compressed batch is decompressed only up to the window's ``max_uncompressed_bytes``
(``maxMessageSize``: the official consumers refuse a larger batch anyway), and a batch whose
messages carry keys is split only up to ``MAX_KEYED_BATCH_MESSAGES`` records (the split costs
about 1.5-2.5 us per record in Python). Beyond either bound ``KeyScanRefused`` is raised: the
publish path refuses the entry (nothing stored), the replay treats it as keyless. Before the
bounds, an 851-byte zstd entry declaring 8 MiB of 6-byte records kept the loop busy for 9.7 s.

Not read (stored as if keyless, documented): chunked messages (PIP-37: a key check per chunk
would store orphan chunks), and encrypted batches (the broker cannot open them).
"""

from __future__ import annotations

import struct
import threading

from protocol._pb import PulsarApi_pb2 as pb
from protocol.compression import CompressionError
from protocol.compression import decode as decompress
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, IDEMPOTENCY_KEY_PROPERTY, CompressionType

__all__ = [
    "MAX_KEYED_BATCH_MESSAGES",
    "MAX_KEYED_HEADER_BYTES",
    "MAX_KEYED_PROPERTIES",
    "EntryKeys",
    "KeyScanRefused",
    "entry_keys",
]

MAX_KEYED_BATCH_MESSAGES = 5000
"""Most messages a batch carrying idempotency keys may hold: 5x the official clients' default
``batchingMaxMessages``; splitting them costs about 1.5 us each here."""

MAX_KEYED_HEADER_BYTES = 512 * 1024
"""Most metadata bytes (the entry's ``MessageMetadata`` plus every record's header) the key
check parses: property-dense headers parse at about 100 MB/s, so about 5 ms at the bound."""

MAX_KEYED_PROPERTIES = 20_000
"""Most properties the key check walks in Python (about 0.2 us each): in the headers that
contain the key's name only, so ordinary batches never come near it."""

_KEY_BYTES = IDEMPOTENCY_KEY_PROPERTY.encode()
_U32 = struct.Struct(">I")
_NONE = CompressionType.NONE
_COMPRESSION_TAG = b"\x40"  # MessageMetadata.compression: field 8, varint


class KeyScanRefused(ValueError):
    """The entry is beyond what the key check reads (module docstring); the text says why."""


class EntryKeys:
    """The keys of one entry's messages, in batch order (None for a message without one)."""

    __slots__ = ("is_batch", "keys")

    def __init__(self, keys: list[str | None], is_batch: bool) -> None:
        self.keys = keys
        self.is_batch = is_batch


def entry_keys(
    entry: bytes, max_uncompressed_bytes: int = DEFAULT_MAX_MESSAGE_SIZE
) -> EntryKeys | None:
    """The keys of ``entry``, or None when no message of it carries one (or cannot be read).

    Raises:
        KeyScanRefused: a compressed batch declares more than ``max_uncompressed_bytes``; or
            the key's name occurs and reading the keys would go beyond the module's bounds
            (``MAX_KEYED_BATCH_MESSAGES``, ``MAX_KEYED_HEADER_BYTES``, ``MAX_KEYED_PROPERTIES``).
    """
    has_name = _KEY_BYTES in entry
    if len(entry) < 4:
        return None
    (size,) = _U32.unpack_from(entry, 0)
    if not has_name and entry.find(_COMPRESSION_TAG, 4, 4 + size) < 0:
        # No key in clear and no ``compression`` field (its tag byte would be there): a keyless
        # entry, answered without parsing (the tag byte may also occur inside other fields'
        # bytes; then the parse below decides).
        return None
    if has_name and size > MAX_KEYED_HEADER_BYTES:
        raise KeyScanRefused(
            f"message metadata of {size} bytes: the idempotency-key check reads at most "
            f"{MAX_KEYED_HEADER_BYTES}"
        )
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
        _check_properties(len(md.properties))
        key = _key_of(md.properties)
        return None if key is None else EntryKeys([key], is_batch=False)
    compressed = int(md.compression) != _NONE
    if not has_name and not compressed:
        return None
    payload: bytes = entry[4 + size :]
    count = md.num_messages_in_batch
    try:
        if compressed:
            declared = md.uncompressed_size
            if declared > max_uncompressed_bytes:
                raise KeyScanRefused(
                    f"compressed batch declares {declared} bytes uncompressed, more than the "
                    f"{max_uncompressed_bytes} (maxMessageSize) the idempotency-key check reads"
                )
            payload = decompress(md.compression, payload, declared)
            if _KEY_BYTES not in payload:
                return None
        if count > MAX_KEYED_BATCH_MESSAGES:
            raise KeyScanRefused(
                f"batch of {count} messages with idempotency keys: at most "
                f"{MAX_KEYED_BATCH_MESSAGES} messages per batch are checked; send smaller batches"
            )
    except CompressionError:
        return None
    keys = _batch_keys(payload, count, MAX_KEYED_HEADER_BYTES - size)
    if keys is None or all(key is None for key in keys):
        return None
    return EntryKeys(keys, is_batch=True)


def _batch_keys(payload: bytes, count: int, header_budget: int) -> list[str | None] | None:
    """The key of each of the ``count`` records of a batch payload (None for a keyless one);
    None when the payload is not exactly ``count`` well-formed records (stored as keyless, as
    the publish path always did). ``protocol.batch.split_batch``'s walk, bounded by the module's
    budgets, and without copying payloads: only the headers are looked at.

    Raises:
        KeyScanRefused: the headers exceed ``header_budget`` bytes or ``MAX_KEYED_PROPERTIES``.
    """
    meta = _single_metadata()
    keys: list[str | None] = []
    position, end = 0, len(payload)
    properties = 0
    while position < end:
        if end - position < 4 or len(keys) == count:
            return None
        (header_size,) = _U32.unpack_from(payload, position)
        header_budget -= header_size
        if header_budget < 0:
            raise KeyScanRefused(
                f"batch record headers above the {MAX_KEYED_HEADER_BYTES} bytes of metadata "
                "the idempotency-key check reads"
            )
        header_end = position + 4 + header_size
        if header_end > end:
            return None
        header = payload[position + 4 : header_end]
        try:
            meta.ParseFromString(header)
        except Exception:  # upb DecodeError
            return None
        if not meta.HasField("payload_size") or meta.payload_size < 0:
            return None
        key = None
        if _KEY_BYTES in header:  # a C-speed test spares walking keyless records' properties
            properties += len(meta.properties)
            _check_properties(properties)
            key = _key_of(meta.properties)
        keys.append(key)
        position = header_end + meta.payload_size
    return keys if position == end and len(keys) == count else None


def _check_properties(walked: int) -> None:
    if walked > MAX_KEYED_PROPERTIES:
        raise KeyScanRefused(
            f"more than {MAX_KEYED_PROPERTIES} properties to look through for idempotency keys"
        )


_PER_THREAD = threading.local()


def _metadata() -> pb.MessageMetadata:
    """One reused message per thread (publish path on the loop, replays in loader threads):
    parsing into it saves an allocation per entry (``ParseFromString`` clears it first)."""
    try:
        md: pb.MessageMetadata = _PER_THREAD.metadata
    except AttributeError:
        md = _PER_THREAD.metadata = pb.MessageMetadata()
    return md


def _single_metadata() -> pb.SingleMessageMetadata:
    """As `_metadata`, for the records of a batch."""
    try:
        single: pb.SingleMessageMetadata = _PER_THREAD.single
    except AttributeError:
        single = _PER_THREAD.single = pb.SingleMessageMetadata()
    return single


def _key_of(properties: object) -> str | None:
    for kv in properties:  # type: ignore[attr-defined]  # repeated KeyValue
        if kv.key == IDEMPOTENCY_KEY_PROPERTY:
            value = kv.value
            return value if value.__class__ is str and value else None
    return None
