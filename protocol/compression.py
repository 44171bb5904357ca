"""Payload codecs for Pulsar's ``CompressionType``, byte-compatible with the official clients.

Pulsar compresses a message's whole payload (the whole batch payload for a batch) and records
the codec in ``MessageMetadata.compression`` and the original length in
``MessageMetadata.uncompressed_size``. What goes on the wire is fixed by the C++ client
(``lib/CompressionCodec*.cc``, which the Java client matches):

* ``LZ4``: a raw LZ4 *block* (``LZ4_compress_default``), no frame and no size prefix; the
  length lives only in ``uncompressed_size``, so the decoder must be told it.
* ``ZLIB``: zlib-wrapped deflate (zlib ``compress()``, default level 6).
* ``ZSTD``: one zstd frame (``ZSTD_compress``, level 3).
* ``SNAPPY``: a raw snappy block (``snappy::Compress``), not the framed stream format.

All four come from one library, ``cramjam`` (Rust implementations, wheels for every platform we
run on, type stubs included): it is the one package that offers the LZ4 *block* format, raw
snappy, zlib and zstd together, and its ``*_into`` functions decompress into a buffer we
allocate, which is how the size bound below is enforced without trusting the input.

Rule 1: ``decode`` never allocates more than the declared ``uncompressed_size``, and refuses a
declared size above ``max_uncompressed_size`` before allocating anything (a decompression bomb
costs us an exception, not memory). Rule 2: the decompressed length must equal the declared
one exactly; anything else is a corrupt message (the official clients would hand garbage to the
application or drop it; we say so). This module is pure: no I/O, no clocks, thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

import cramjam

from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, AckValidationError, CompressionType

DEFAULT_MAX_UNCOMPRESSED_SIZE = 32 * DEFAULT_MAX_MESSAGE_SIZE
"""Largest ``uncompressed_size`` ``decode`` accepts unless told otherwise: 160 MiB.

A plain entry cannot legitimately exceed ``maxMessageSize`` once decompressed (the official
consumers refuse it; callers should pass ``max_message_size`` for those), but a chunked message
is decompressed after reassembly and may be many times larger. 32 x 5 MiB leaves room for such
messages while one lying header cannot make us allocate gigabytes."""

_ZLIB_LEVEL = 6  # zlib's Z_DEFAULT_COMPRESSION, what the C++ client's compress() uses
_ZSTD_LEVEL = 3  # COMPRESSION_LEVEL in the C++ client's CompressionCodecZstd.cc


class CompressionError(ValueError):
    """A payload cannot be decompressed as its metadata describes.

    Attributes:
        validation_error: the ``CommandAck.ValidationError`` a consumer reports when it
            acknowledges (discards) the message, as the official clients do.
    """

    def __init__(self, message: str, validation_error: AckValidationError) -> None:
        super().__init__(message)
        self.validation_error = validation_error


def _lz4_encode(payload: bytes | memoryview) -> bytes:
    return bytes(cramjam.lz4.compress_block(payload, store_size=False))


def _zlib_encode(payload: bytes | memoryview) -> bytes:
    return bytes(cramjam.zlib.compress(payload, level=_ZLIB_LEVEL))


def _zstd_encode(payload: bytes | memoryview) -> bytes:
    return bytes(cramjam.zstd.compress(payload, level=_ZSTD_LEVEL))


def _snappy_encode(payload: bytes | memoryview) -> bytes:
    return bytes(cramjam.snappy.compress_raw(payload))


_Decoder = Callable[[bytes | memoryview, bytearray], int]

_ENCODERS: dict[CompressionType, Callable[[bytes | memoryview], bytes]] = {
    CompressionType.LZ4: _lz4_encode,
    CompressionType.ZLIB: _zlib_encode,
    CompressionType.ZSTD: _zstd_encode,
    CompressionType.SNAPPY: _snappy_encode,
}

# Each writes into the caller's buffer and returns the decompressed length; each raises
# cramjam.DecompressionError if the output does not fit or the input is malformed.
_DECODERS: dict[CompressionType, _Decoder] = {
    CompressionType.LZ4: cramjam.lz4.decompress_block_into,
    CompressionType.ZLIB: cramjam.zlib.decompress_into,
    CompressionType.ZSTD: cramjam.zstd.decompress_into,
    CompressionType.SNAPPY: cramjam.snappy.decompress_raw_into,
}


def encode(compression: CompressionType | int, payload: bytes | memoryview) -> bytes:
    """Compress ``payload`` as the official clients do for ``compression``.

    The caller records ``len(payload)`` in ``MessageMetadata.uncompressed_size`` (the LZ4 block
    format does not carry it).

    Raises:
        ValueError: ``compression`` is not a ``CompressionType`` value.
    """
    kind = _kind(compression)
    if kind is CompressionType.NONE:
        return bytes(payload)
    return _ENCODERS[kind](payload)


def decode(
    compression: CompressionType | int,
    data: bytes | memoryview,
    uncompressed_size: int,
    *,
    max_uncompressed_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> bytes:
    """Decompress ``data`` into exactly ``uncompressed_size`` bytes.

    Args:
        compression: ``MessageMetadata.compression``.
        data: the payload as stored (for a chunked message: all chunks joined).
        uncompressed_size: ``MessageMetadata.uncompressed_size``; ignored for ``NONE``.
        max_uncompressed_size: refuse larger declared sizes without allocating. Consumers pass
            the connection's ``max_message_size`` for ordinary entries, as the official clients
            check, and keep the default for reassembled chunked messages.

    Raises:
        CompressionError: unknown codec or corrupt data (``validation_error`` =
            ``DecompressionError``), or a declared size that is negative or above the bound
            (``UncompressedSizeCorruption``).
    """
    try:
        kind = CompressionType(compression)
    except ValueError:
        raise CompressionError(
            f"unknown compression type {compression}", AckValidationError.DecompressionError
        ) from None
    if kind is CompressionType.NONE:
        return bytes(data)
    if not 0 <= uncompressed_size <= max_uncompressed_size:
        raise CompressionError(
            f"declared uncompressed size {uncompressed_size} is outside 0..{max_uncompressed_size}",
            AckValidationError.UncompressedSizeCorruption,
        )
    output = bytearray(uncompressed_size)
    try:
        written = _DECODERS[kind](data, output)
    except cramjam.DecompressionError as exc:
        raise CompressionError(
            f"corrupt {kind.name} payload of {len(data)} bytes "
            f"(declared {uncompressed_size} bytes uncompressed): {exc}",
            AckValidationError.DecompressionError,
        ) from None
    if written != uncompressed_size:
        raise CompressionError(
            f"{kind.name} payload decompressed to {written} bytes, "
            f"metadata declares {uncompressed_size}",
            AckValidationError.DecompressionError,
        )
    return bytes(output)


def _kind(compression: CompressionType | int) -> CompressionType:
    try:
        return CompressionType(compression)
    except ValueError:
        raise ValueError(f"unknown compression type {compression}") from None
