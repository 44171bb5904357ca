"""Reading the idempotency keys of an entry (issue #16), for the publish path and the replay.

The keys come out as 16-byte digests (`protocol.idempotency_scan`: a walk over the wire bytes,
compiled in ``protocol/_keys.pxi``, with the pure-Python reference beside it; issue #26).

A non-batched message carries the key in ``MessageMetadata.properties``; the messages of a batch
in their ``SingleMessageMetadata.properties``. An entry that does not contain the property name
anywhere and whose metadata has no ``compression`` field is answered without parsing (the
common case costs two substring searches); a compressed batch is decompressed to read the
per-message metadata.

The work per entry is bounded, because the publish path runs this on the event loop (issue
#24): a compressed batch is decompressed only up to the window's ``max_uncompressed_bytes``
(``maxMessageSize``: the official consumers refuse a larger batch anyway), and a batch whose
messages carry keys is split only up to ``MAX_KEYED_BATCH_MESSAGES`` records (the pure-Python
walk costs about 1.5-2.5 us per record). Beyond either bound ``KeyScanRefused`` is raised: the
publish path refuses the entry (nothing stored), the replay treats it as keyless. Before the
bounds, an 851-byte zstd entry declaring 8 MiB of 6-byte records kept the loop busy for 9.7 s.

Not read (stored as if keyless, documented): chunked messages (PIP-37: a key check per chunk
would store orphan chunks), and encrypted batches (the broker cannot open them).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from broker.publish.idempotency_window import Verdict
from broker.publish.publication import Settled
from protocol.compression import CompressionError
from protocol.compression import decode as decompress
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, IDEMPOTENCY_KEY_PROPERTY, CompressionType
from protocol.idempotency_scan import KeyScanBudget, scan_batch, scan_metadata

if TYPE_CHECKING:
    from broker.publish.idempotency_window import IdempotencyWindow, Ticket

__all__ = [
    "MAX_KEYED_BATCH_MESSAGES",
    "MAX_KEYED_HEADER_BYTES",
    "MAX_KEYED_PROPERTIES",
    "EntryKeys",
    "KeyInFlight",
    "KeyScanRefused",
    "admit_entry",
    "entry_keys",
]

MAX_KEYED_BATCH_MESSAGES = 5000
"""Most messages a batch carrying idempotency keys may hold: 5x the official clients' default
``batchingMaxMessages``."""

MAX_KEYED_HEADER_BYTES = 512 * 1024
"""Most metadata bytes (the entry's ``MessageMetadata`` plus every record's header) the key
check walks: about 5 ms at the bound for the pure-Python walk."""

MAX_KEYED_PROPERTIES = 20_000
"""Most properties the key check counts in the headers that carry a key (about 0.2 us each in
the pure-Python walk), so ordinary batches never come near it."""

_KEY_BYTES = IDEMPOTENCY_KEY_PROPERTY.encode()
_U32 = struct.Struct(">I")
_NONE = CompressionType.NONE
_COMPRESSION_TAG = b"\x40"  # MessageMetadata.compression: field 8, varint


class KeyScanRefused(ValueError):
    """The entry is beyond what the key check reads (module docstring); the text says why."""


class EntryKeys:
    """The key digests of one entry's messages, in batch order (None: a message without one)."""

    __slots__ = ("is_batch", "keys")

    def __init__(self, keys: list[bytes | None], is_batch: bool) -> None:
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
        # bytes; then the scan below decides).
        return None
    if has_name and size > MAX_KEYED_HEADER_BYTES:
        raise KeyScanRefused(
            f"message metadata of {size} bytes: the idempotency-key check reads at most "
            f"{MAX_KEYED_HEADER_BYTES}"
        )
    try:
        scanned = scan_metadata(entry, MAX_KEYED_PROPERTIES)
    except KeyScanBudget as exc:
        raise KeyScanRefused(str(exc)) from None
    if scanned is None:  # malformed (the publish path validated it), chunked or encrypted
        return None
    size, count, compression, declared, digest = scanned
    if count < 0:  # not a batch: the entry's own properties
        return None if digest is None else EntryKeys([digest], is_batch=False)
    compressed = compression != _NONE
    if not has_name and not compressed:
        return None
    payload: bytes = entry[4 + size :]
    try:
        if compressed:
            if declared > max_uncompressed_bytes:
                raise KeyScanRefused(
                    f"compressed batch declares {declared} bytes uncompressed, more than the "
                    f"{max_uncompressed_bytes} (maxMessageSize) the idempotency-key check reads"
                )
            payload = decompress(compression, payload, declared)
            if _KEY_BYTES not in payload:
                return None
        if count > MAX_KEYED_BATCH_MESSAGES:
            raise KeyScanRefused(
                f"batch of {count} messages with idempotency keys: at most "
                f"{MAX_KEYED_BATCH_MESSAGES} messages per batch are checked; send smaller batches"
            )
    except CompressionError:
        return None
    try:
        keys = scan_batch(payload, count, MAX_KEYED_HEADER_BYTES - size, MAX_KEYED_PROPERTIES)
    except KeyScanBudget as exc:
        raise KeyScanRefused(
            f"{exc} (at most {MAX_KEYED_HEADER_BYTES} bytes of metadata and "
            f"{MAX_KEYED_PROPERTIES} properties are read)"
        ) from None
    if keys is None or all(key is None for key in keys):
        return None
    return EntryKeys(keys, is_batch=True)


class KeyInFlight(Exception):
    """A key of the entry is still being written: whether it is a duplicate is not known yet."""


def admit_entry(
    window: IdempotencyWindow, entry: bytes, quick: bytes | None
) -> Ticket | int | Settled | None:
    """Check and admit the keys of an entry, on the SEND path (issue #26).

    ``quick`` is what `quick_key` said of ``entry`` when not False: the digest of a single
    message's key (then one call into the window's table decides and admits it), or None (a
    batch or a compressed entry: `entry_keys`, `IdempotencyWindow.check` and ``admit``).

    Returns the ticket of the admitted keys (settle it with `IdempotencyWindow.on_persisted`
    or ``on_write_failed``; a refusal after this call must release it that way), the answer
    to a duplicate (its original's position), or None: no key, nothing admitted.

    Raises:
        KeyInFlight: a key of the entry is still being written.
        KeyScanRefused: as `entry_keys`.
    """
    if quick is not None:
        answer = window.reserve_one(quick)
        if answer is None:
            raise KeyInFlight
        return answer if isinstance(answer, int) else Settled(answer)
    keys = entry_keys(entry, window.config.max_uncompressed_bytes)
    if keys is None:
        return None
    admission = window.check(keys.keys)
    verdict = admission.verdict
    if verdict is Verdict.DUPLICATE:
        return Settled(admission.original)
    if verdict is Verdict.IN_FLIGHT:
        raise KeyInFlight
    return window.admit(admission)
