"""Entry metadata: ``[metadataSize u32][MessageMetadata][payload]``, the bytes a broker stores.

The broker keeps every entry verbatim (the SEND frame after the checksum) and relays it
unchanged, so metadata is parsed only to learn a few facts (dedup sequence ids, batch size,
publish time for seek-by-time, keys for Key_Shared, delayed delivery). ``EntryMetadata`` exposes
those facts as plain Python values so domain code never touches protobuf types.

Invariant: nothing here re-serializes stored metadata; ``encode_entry`` is for producers that
build a new entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from protocol._accel import speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import LocalProtocolError, RemoteProtocolError

_U32 = struct.Struct(">I")
_U32_FROM = _U32.unpack_from


@dataclass(slots=True)
class EntryMetadata:
    """Facts read from the ``MessageMetadata`` at the start of an entry.

    Read-only by convention, not ``frozen``: a frozen dataclass sets each of its 14 fields through
    ``object.__setattr__``, which made construction 1.3 µs against 0.2 µs, paid once per entry
    the broker dispatches.

    Attributes:
        producer_name: the producer that published the entry.
        sequence_id: sequence id of the entry (of its first message for a batch).
        highest_sequence_id: ``highest_sequence_id`` if the producer set it, else None.
        num_messages: messages in the entry (``num_messages_in_batch``, 1 if not a batch).
        is_batch: the metadata carries ``num_messages_in_batch`` (clients decide on that).
        publish_time: client publish time, ms since the epoch.
        partition_key: the message key, if any.
        ordering_key: the Key_Shared ordering key, if any.
        deliver_at_time: delayed-delivery time (ms since the epoch), if any.
        event_time: application event time, None when absent or 0 (0 means "unset").
        compression: ``CompressionType`` value of the payload (0 = none).
        payload_offset: index in the entry where the payload starts.
        chunk_id: index of this chunk in a chunked message (PIP-37), -1 if not a chunk.
        num_chunks: chunks of that message, 0 if not a chunk.
    """

    producer_name: str
    sequence_id: int
    highest_sequence_id: int | None
    num_messages: int
    is_batch: bool
    publish_time: int
    partition_key: str | None
    ordering_key: bytes | None
    deliver_at_time: int | None
    event_time: int | None
    compression: int = 0
    payload_offset: int = 0
    chunk_id: int = -1
    num_chunks: int = 0

    @property
    def is_partial_chunk(self) -> bool:
        """A chunk that is not the last of its message (dedup tracks it separately)."""
        return self.num_chunks > 0 and self.chunk_id != self.num_chunks - 1


class ChunkInfo(NamedTuple):
    """Where one chunk sits in a chunked message (PIP-37): the facts dedup needs."""

    uuid: str
    chunk_id: int
    num_chunks: int

    @property
    def is_last(self) -> bool:
        return self.chunk_id == self.num_chunks - 1


_MAX_CHUNKS = 1 << 20
_HAS_FIELD = pb.MessageMetadata.HasField


class PySendEntryChecker:
    """Validates the entry of each SEND before anything is stored (one per connection).

    The reference; ``SendEntryChecker`` (end of the module) is the compiled one when built.

    Accepted entries are exactly those ``parse_entry_metadata`` later reads without error, so
    nothing stored can block dispatch, readers or dedup replay. This runs for every SEND, so it
    is built for speed (about 1 us per entry on this machine, see ``bench/bench_protocol.py``):
    it parses into one reused message instead of allocating one per entry, which is why an
    instance must stay with one thread (the broker keeps one per connection); it tests the
    three required fields with ``HasField`` (cheaper than ``IsInitialized``); and it reads
    ``num_messages_in_batch`` plainly, because its proto default of 1 is the right answer for
    an entry that is not a batch. The payload of a batch is not opened: it may be compressed or
    encrypted.
    """

    __slots__ = ("_metadata",)

    def __init__(self) -> None:
        self._metadata = pb.MessageMetadata()

    def check(self, entry: bytes, num_messages: int) -> ChunkInfo | None:
        """Return the chunk facts of a valid entry (None when it is not a chunk).

        ``num_messages`` is ``CommandSend.num_messages`` (1 when absent).

        Raises:
            RemoteProtocolError: sizes do not fit, the metadata does not parse or lacks a
                required field, the batch count contradicts ``num_messages``, or the chunk
                fields are inconsistent.
        """
        if len(entry) < 4:
            raise RemoteProtocolError("entry shorter than its metadata size field")
        (size,) = _U32_FROM(entry, 0)
        if size > len(entry) - 4:
            raise RemoteProtocolError(
                f"metadata size {size} exceeds the {len(entry) - 4} bytes left"
            )
        md = self._metadata
        try:
            md.ParseFromString(entry[4 : 4 + size])
        except Exception as exc:  # upb DecodeError
            raise RemoteProtocolError(f"cannot parse MessageMetadata: {exc}") from None
        # An empty producer_name is refused like a missing one (the broker keys dedup on it),
        # which saves a HasField. proto2 keeps a string that is not UTF-8 as bytes: the broker
        # keys on producer_name and partition_key, so both must be str.
        name = md.producer_name
        if (
            not name
            or name.__class__ is not str
            or md.partition_key.__class__ is not str
            or not (_HAS_FIELD(md, "sequence_id") and _HAS_FIELD(md, "publish_time"))
        ):
            raise RemoteProtocolError(_missing_or_invalid(md))
        in_batch = md.num_messages_in_batch
        if in_batch != num_messages or in_batch < 1:
            raise RemoteProtocolError(
                f"num_messages_in_batch {in_batch} contradicts the SEND's "
                f"num_messages {num_messages}"
            )
        num_chunks = md.num_chunks_from_msg
        if not num_chunks:
            return None
        chunk_id = md.chunk_id
        uuid = md.uuid
        if (
            not 0 <= chunk_id < num_chunks <= _MAX_CHUNKS
            or in_batch != 1
            or not uuid
            or uuid.__class__ is not str
        ):
            raise RemoteProtocolError(
                f"inconsistent chunk fields: chunk {chunk_id} of {num_chunks}, "
                f"{in_batch} messages, uuid {md.uuid!r}"
            )
        return ChunkInfo(uuid, chunk_id, num_chunks)


def _missing_or_invalid(md: pb.MessageMetadata) -> str:
    """What is wrong with metadata `SendEntryChecker` refused (the slow path only)."""
    if md.producer_name.__class__ is not str or md.partition_key.__class__ is not str:
        return "producer_name or partition_key is not valid UTF-8"
    return "MessageMetadata lacks producer_name, sequence_id or publish_time"


def py_decode_entry(entry: bytes | memoryview) -> tuple[pb.MessageMetadata, bytes]:
    """Split an entry into its parsed ``MessageMetadata`` and its payload bytes.

    This is the reference; ``decode_entry`` (end of the module) is the compiled one when built.

    Raises:
        RemoteProtocolError: sizes do not fit, or the metadata is unparsable or incomplete.
    """
    metadata, payload_offset = _parse(entry)
    return metadata, bytes(entry[payload_offset:])


def py_decode_entry_plain(entry: bytes | memoryview) -> tuple[pb.MessageMetadata, bytes, bool]:
    """``decode_entry``, and whether the entry is one plain message: not a batch, not a chunk,
    not compressed, not encrypted (what a consumer can hand out as it is).

    This is the reference; ``decode_entry_plain`` is the compiled one when built.
    """
    metadata, payload = py_decode_entry(entry)
    plain = not (
        metadata.encryption_keys
        or metadata.HasField("num_messages_in_batch")
        or metadata.num_chunks_from_msg
        or metadata.compression
    )
    return metadata, payload, plain


def py_decode_plain_entry_lazily(entry: bytes | memoryview) -> tuple[bytes, bytes] | None:
    """For an entry that is one plain message with no ``compression`` field at all: its
    metadata's bytes (they parse, and pass ``decode_entry``'s checks) and its payload, so a
    consumer can hand the message out and parse the metadata only if the application reads
    it; None for any other entry, valid or not (``decode_entry_plain`` then decides).

    This is the reference; ``decode_plain_entry_lazily`` is the compiled one when built."""
    try:
        metadata, payload, plain = py_decode_entry_plain(entry)
    except RemoteProtocolError:
        return None
    if not plain or metadata.HasField("compression"):
        return None
    (size,) = _U32_FROM(entry, 0)
    return bytes(entry[4 : 4 + size]), payload


def py_parse_entry_metadata(entry: bytes | memoryview) -> EntryMetadata:
    """Read the metadata facts of a stored entry.

    Raises:
        RemoteProtocolError: sizes do not fit, or the metadata is unparsable or incomplete.
    """
    md, payload_offset = _parse(entry)
    is_batch = md.HasField("num_messages_in_batch")
    return EntryMetadata(
        producer_name=md.producer_name,
        sequence_id=md.sequence_id,
        highest_sequence_id=md.highest_sequence_id if md.HasField("highest_sequence_id") else None,
        num_messages=md.num_messages_in_batch if is_batch else 1,
        is_batch=is_batch,
        publish_time=md.publish_time,
        partition_key=md.partition_key if md.HasField("partition_key") else None,
        ordering_key=md.ordering_key if md.HasField("ordering_key") else None,
        deliver_at_time=md.deliver_at_time if md.HasField("deliver_at_time") else None,
        event_time=md.event_time or None,
        compression=md.compression,
        payload_offset=payload_offset,
        chunk_id=md.chunk_id if md.num_chunks_from_msg else -1,
        num_chunks=md.num_chunks_from_msg,
    )


def encode_entry(metadata: pb.MessageMetadata, payload: bytes | memoryview) -> bytes:
    """Return ``[metadataSize][metadata][payload]`` for a new message or batch.

    Raises:
        LocalProtocolError: a required metadata field is missing.
    """
    try:
        header = metadata.SerializeToString()
    except Exception as exc:  # EncodeError: required field missing
        raise LocalProtocolError(f"cannot encode MessageMetadata: {exc}") from exc
    return b"".join((_U32.pack(len(header)), header, payload))


def _parse(entry: bytes | memoryview) -> tuple[pb.MessageMetadata, int]:
    if len(entry) < 4:
        raise RemoteProtocolError("entry shorter than its metadata size field")
    (size,) = _U32.unpack_from(entry, 0)
    if size > len(entry) - 4:
        raise RemoteProtocolError(f"metadata size {size} exceeds the {len(entry) - 4} bytes left")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(memoryview(entry)[4 : 4 + size])  # type: ignore[arg-type]  # upb takes any buffer
    except Exception as exc:  # upb DecodeError
        raise RemoteProtocolError(f"cannot parse MessageMetadata: {exc}") from exc
    if not metadata.IsInitialized():
        raise RemoteProtocolError(
            "MessageMetadata lacks producer_name, sequence_id or publish_time"
        )
    if metadata.producer_name.__class__ is not str or metadata.partition_key.__class__ is not str:
        raise RemoteProtocolError("producer_name or partition_key is not valid UTF-8")
    return metadata, 4 + size


_speedups = speedups()
if TYPE_CHECKING:
    SendEntryChecker = PySendEntryChecker
elif _speedups is not None:
    SendEntryChecker = _speedups.bind_metadata(PySendEntryChecker, ChunkInfo)
else:
    SendEntryChecker = PySendEntryChecker

if TYPE_CHECKING:
    decode_entry = py_decode_entry
    decode_entry_plain = py_decode_entry_plain
elif _speedups is not None:
    decode_entry, decode_entry_plain = _speedups.bind_decode_entry(
        py_decode_entry, py_decode_entry_plain
    )
else:
    decode_entry, decode_entry_plain = py_decode_entry, py_decode_entry_plain

if TYPE_CHECKING:
    parse_entry_metadata = py_parse_entry_metadata
elif _speedups is not None:
    parse_entry_metadata = _speedups.bind_parse_entry_metadata(
        py_parse_entry_metadata, EntryMetadata
    )
else:
    parse_entry_metadata = py_parse_entry_metadata

if TYPE_CHECKING:
    decode_plain_entry_lazily = py_decode_plain_entry_lazily
elif _speedups is not None:
    # No fallback to bind: its None ("decide with decode_entry_plain") is always an answer.
    decode_plain_entry_lazily = _speedups.decode_plain_entry_lazily
else:
    decode_plain_entry_lazily = py_decode_plain_entry_lazily
