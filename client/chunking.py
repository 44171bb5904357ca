"""Chunking (PIP-37): one message too large for ``maxMessageSize`` sent as several entries.

Producer side, as the C++ client does (``ProducerImpl::sendAsync``): the payload is compressed
first, then cut into consecutive slices; every slice becomes one entry whose metadata is the
message's metadata plus ``uuid = "<producer_name>-<sequence_id>"``, ``num_chunks_from_msg``,
``total_chunk_msg_size`` (the compressed size) and ``chunk_id``. Every chunk carries the
message's ``sequence_id`` (dedup treats the chunks of one message as one message) and goes in
a SEND with ``is_chunk=true``. The official producer completes the send with the last chunk's
receipt and reports a ``ChunkMessageId`` (first and last chunk positions); ``ChunkedMessageId``
is that id, serialized the same way (``first_chunk_message_id`` inside the last chunk's id).
A message with chunking enabled that fits one entry is sent as a plain entry, no chunk fields.

Consumer side, ``ChunkAssembler`` follows the official consumers (Java ``ConsumerImpl
.processMessageChunk``, C++ ``ConsumerImpl::processMessageChunk``): chunks are joined by uuid
in chunk order; a chunk id at or below the last one received is a duplicate (a producer resend
stored twice, or a redelivery) and is ignored, and acknowledged when it is a distinct stored
copy, never delivered; a first chunk arriving again restarts the message (acknowledging the
chunks of the abandoned attempt if it is another stored copy); a gap drops the message. At
most ``max_pending_chunked_message`` messages are pending: the oldest is dropped to make room,
its chunks acknowledged when ``auto_ack_oldest_chunked_message_on_queue_full`` else left for
redelivery. An incomplete message is dropped and acknowledged once no chunk of it arrived for
``expire_time_of_incomplete_chunked_message_ms`` (the C++ rule; Java counts from the first
chunk). The assembler never acks or redelivers itself: every call returns what the consumer
must do (``ChunkOutcome``).

Pure: no clocks (the caller passes ``now`` in ms), no I/O. Not thread-safe: one consumer owns
one assembler. Each non-final chunk still costs the consumer a broker permit; the consumer
returns that permit itself, as the Java client does, or a receiver queue smaller than a
message's chunk count would stall.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol import commands, pb
from protocol.compression import DEFAULT_MAX_UNCOMPRESSED_SIZE
from protocol.ids import MessageId
from protocol.metadata import encode_entry

_I32_MAX = (1 << 31) - 1

DEFAULT_MAX_PENDING_CHUNKED_MESSAGE = 10
DEFAULT_EXPIRE_TIME_OF_INCOMPLETE_CHUNKED_MESSAGE_MS = 60_000
"""The official clients' defaults."""


class ChunkingError(ValueError):
    """The message cannot be chunked (its metadata alone fills ``max_message_size``, or it is
    larger than a chunked message may be); the official clients report ``MessageTooBig``."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One entry of a (possibly chunked) message, ready for a SEND.

    Attributes:
        entry: ``[metadataSize][MessageMetadata][payload slice]``.
        sequence_id: the message's sequence id (the same for every chunk).
        chunk_id: index of this chunk, 0 for an unchunked message.
        num_chunks: chunks of the message, 1 for an unchunked message (no chunk fields).
    """

    entry: bytes
    sequence_id: int
    chunk_id: int
    num_chunks: int

    @property
    def is_chunk(self) -> bool:
        return self.num_chunks > 1

    @property
    def is_last(self) -> bool:
        """The receipt of this entry completes the send."""
        return self.chunk_id == self.num_chunks - 1

    def send(self, producer_id: int) -> bytes:
        """The SEND frame for this entry (``is_chunk`` set for real chunks, as C++ does)."""
        return commands.send(producer_id, self.sequence_id, self.entry, is_chunk=self.is_chunk)


def chunk_uuid(producer_name: str, sequence_id: int) -> str:
    """The uuid the official producers give the chunks of one message."""
    return f"{producer_name}-{sequence_id}"


def split_into_chunks(
    metadata: pb.MessageMetadata, payload: bytes, max_message_size: int
) -> list[Chunk]:
    """Cut a message into entries of at most ``max_message_size`` bytes each.

    Args:
        metadata: the message's metadata (``batching.message_metadata``), with the codec
            fields already set (``batching.compress_payload``); it is not modified.
        payload: the compressed payload.
        max_message_size: the broker's limit from CONNECTED. Unlike the C++ client, which
            subtracts only the metadata size measured before the chunk fields are added, each
            whole entry (size prefix, metadata with chunk fields, slice) stays within it.

    Returns:
        One plain entry if the message fits, else the chunks in order.

    Raises:
        ChunkingError: the metadata leaves no room for payload, or the payload exceeds the
            int32 ``total_chunk_msg_size``.
    """
    if 4 + metadata.ByteSize() + len(payload) <= max_message_size:
        return [Chunk(encode_entry(metadata, payload), metadata.sequence_id, 0, 1)]
    if len(payload) > _I32_MAX:
        raise ChunkingError(f"a payload of {len(payload)} bytes cannot be chunked (int32 size)")
    chunked = pb.MessageMetadata()
    chunked.CopyFrom(metadata)
    chunked.uuid = chunk_uuid(metadata.producer_name, metadata.sequence_id)
    chunked.total_chunk_msg_size = len(payload)
    # Varints grow with their value: measure with the largest chunk id/count this payload
    # could need, so the real headers are never longer than the room reserved for them.
    chunked.num_chunks_from_msg = chunked.chunk_id = len(payload)
    room = max_message_size - 4 - chunked.ByteSize()
    if room <= 0:
        raise ChunkingError(
            f"message metadata of {chunked.ByteSize()} bytes leaves no room for payload "
            f"within max_message_size {max_message_size}"
        )
    num_chunks = -(-len(payload) // room)
    chunked.num_chunks_from_msg = num_chunks
    chunks = []
    view = memoryview(payload)  # slices without copying; encode_entry copies once
    for chunk_id in range(num_chunks):
        chunked.chunk_id = chunk_id
        piece = view[chunk_id * room : (chunk_id + 1) * room]
        chunks.append(
            Chunk(encode_entry(chunked, piece), metadata.sequence_id, chunk_id, num_chunks)
        )
    return chunks


@dataclass(frozen=True, slots=True)
class ChunkedMessageId:
    """The id of a chunked message: the positions of its first and last chunks.

    Ordering and acknowledgement go by ``last`` (where the message completes); the official
    clients serialize it as the last chunk's ``MessageIdData`` carrying the first chunk's in
    ``first_chunk_message_id``.
    """

    first: MessageId
    last: MessageId

    def serialize(self) -> bytes:
        data = self.last.to_pb()
        self.first.write_to(data.first_chunk_message_id)
        return data.SerializeToString()


@dataclass(frozen=True, slots=True)
class AssembledMessage:
    """A chunked message whose chunks all arrived.

    Attributes:
        metadata: the last chunk's metadata (the message's fields; codec and
            ``uncompressed_size`` describe the joined payload).
        payload: every chunk's payload joined, still compressed.
        chunk_ids: the id of each chunk's entry, in chunk order (acknowledging the message
            means acknowledging all of them).
    """

    metadata: pb.MessageMetadata
    payload: bytes
    chunk_ids: tuple[MessageId, ...]

    @property
    def message_id(self) -> ChunkedMessageId:
        return ChunkedMessageId(self.chunk_ids[0], self.chunk_ids[-1])


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    """What one call to the assembler means for the consumer.

    Attributes:
        message: the message this chunk completed, if any.
        ack: entries to acknowledge now: duplicate stored copies and chunks of messages
            dropped for good (expired, corrupt, or evicted with auto-ack).
        redeliver: entries of dropped messages to hand back for redelivery (negative-ack or
            leave to the ack timeout, as the official clients' ``trackMessage`` does).
    """

    message: AssembledMessage | None = None
    ack: tuple[MessageId, ...] = ()
    redeliver: tuple[MessageId, ...] = ()


_NOTHING = ChunkOutcome()


@dataclass(slots=True)
class _Pending:
    """A chunked message being reassembled."""

    num_chunks: int
    total_size: int
    last_received: int
    parts: list[bytes] = field(default_factory=list)
    ids: list[MessageId] = field(default_factory=list)
    size: int = 0

    @property
    def last_chunk_id(self) -> int:
        return len(self.ids) - 1


def is_chunk(metadata: pb.MessageMetadata) -> bool:
    """Whether an entry is one chunk of a chunked message (the official consumers' test)."""
    return metadata.num_chunks_from_msg > 1 and not metadata.HasField("num_messages_in_batch")


class ChunkAssembler:
    """Reassembles chunked messages for one consumer (see the module docstring for the rules).

    Args:
        max_pending_chunked_message: incomplete messages kept at once; 0 = no limit.
        auto_ack_oldest_chunked_message_on_queue_full: acknowledge (True) or hand back for
            redelivery (False) the chunks of the message evicted to make room.
        expire_time_of_incomplete_chunked_message_ms: drop (and acknowledge) a message when no
            chunk of it arrived for this long; 0 = never.
        max_chunked_message_size: refuse a message declaring a larger total, so a bogus
            header cannot make us hold unbounded memory.
    """

    def __init__(
        self,
        *,
        max_pending_chunked_message: int = DEFAULT_MAX_PENDING_CHUNKED_MESSAGE,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        expire_time_of_incomplete_chunked_message_ms: int = (
            DEFAULT_EXPIRE_TIME_OF_INCOMPLETE_CHUNKED_MESSAGE_MS
        ),
        max_chunked_message_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
    ) -> None:
        self.max_pending_chunked_message = max_pending_chunked_message
        self.auto_ack_oldest = auto_ack_oldest_chunked_message_on_queue_full
        self.expire_ms = expire_time_of_incomplete_chunked_message_ms
        self.max_chunked_message_size = max_chunked_message_size
        self._pending: dict[str, _Pending] = {}  # insertion order = age (oldest first)

    @property
    def pending_count(self) -> int:
        """Incomplete messages held."""
        return len(self._pending)

    def add(
        self, metadata: pb.MessageMetadata, payload: bytes, message_id: MessageId, now: int
    ) -> ChunkOutcome:
        """Take one chunk (``is_chunk(metadata)`` must hold) received at ``now`` (ms).

        Raises:
            ValueError: the entry is not a chunk.
        """
        if not is_chunk(metadata):
            raise ValueError("not a chunk: num_chunks_from_msg <= 1 or a batch entry")
        uuid, chunk_id = metadata.uuid, metadata.chunk_id
        ack: list[MessageId] = []
        redeliver: list[MessageId] = []
        pending = self._pending.get(uuid)
        if chunk_id == 0:
            if pending is not None:
                # The first chunk again. Another stored copy means the earlier chunks belong
                # to an abandoned attempt that will never complete: acknowledge them. The same
                # entry again is a redelivery: just start over.
                if message_id not in pending.ids:
                    ack += pending.ids
                del self._pending[uuid]
            if not 0 <= metadata.total_chunk_msg_size <= self.max_chunked_message_size:
                return self._give_up([message_id], metadata, now, ack, redeliver)
            evicted = self._make_room()
            (ack if self.auto_ack_oldest else redeliver).extend(evicted)
            pending = self._pending[uuid] = _Pending(
                metadata.num_chunks_from_msg, metadata.total_chunk_msg_size, now
            )
        elif pending is not None and 0 < chunk_id <= pending.last_chunk_id:
            # A duplicate: acknowledge a distinct stored copy, ignore a redelivered one.
            if message_id not in pending.ids:
                ack.append(message_id)
            return _outcome(None, ack, redeliver)
        if (
            pending is None
            or chunk_id != pending.last_chunk_id + 1
            or metadata.num_chunks_from_msg != pending.num_chunks
            or pending.size + len(payload) > pending.total_size
        ):
            ids = [message_id] if pending is None else [*self._pending.pop(uuid).ids, message_id]
            return self._give_up(ids, metadata, now, ack, redeliver)
        pending.parts.append(payload)
        pending.ids.append(message_id)
        pending.size += len(payload)
        pending.last_received = now
        if chunk_id < pending.num_chunks - 1:
            return _outcome(None, ack, redeliver)
        del self._pending[uuid]
        if pending.size != pending.total_size:
            return self._give_up(pending.ids, metadata, now, ack, redeliver)
        message = AssembledMessage(metadata, b"".join(pending.parts), tuple(pending.ids))
        return _outcome(message, ack, redeliver)

    def expire(self, now: int) -> ChunkOutcome:
        """Drop every message no chunk of which arrived within the expiry time; ack them all."""
        if self.expire_ms <= 0:
            return _NOTHING
        expired = [
            uuid
            for uuid, pending in self._pending.items()
            if now > pending.last_received + self.expire_ms
        ]
        ack = [mid for uuid in expired for mid in self._pending.pop(uuid).ids]
        return ChunkOutcome(ack=tuple(ack)) if ack else _NOTHING

    def next_expiry(self) -> int | None:
        """When ``expire`` would next drop something (ms), None if nothing can expire."""
        if self.expire_ms <= 0 or not self._pending:
            return None
        return min(p.last_received for p in self._pending.values()) + self.expire_ms + 1

    def clear(self) -> None:
        """Forget every incomplete message (after a seek or a reconnection, when the broker
        delivers again from the cursor and the partial state would only mislead)."""
        self._pending.clear()

    def _make_room(self) -> list[MessageId]:
        """Evict the oldest incomplete messages until one more fits; return their ids."""
        limit = self.max_pending_chunked_message
        evicted: list[MessageId] = []
        while limit > 0 and len(self._pending) >= limit:
            evicted += self._pending.pop(next(iter(self._pending))).ids
        return evicted

    def _give_up(
        self,
        ids: list[MessageId],
        metadata: pb.MessageMetadata,
        now: int,
        ack: list[MessageId],
        redeliver: list[MessageId],
    ) -> ChunkOutcome:
        """Drop a message that cannot complete here: a gap, a chunk without its start, or
        sizes that contradict the header.

        As the official clients do for an unexpected chunk, its entries are acknowledged if
        the message is older than the expiry time (it can no longer complete), else handed
        back for redelivery (the missing chunks may come, in order, next time).
        """
        if self.expire_ms > 0 and now > metadata.publish_time + self.expire_ms:
            ack += ids
        else:
            redeliver += ids
        return _outcome(None, ack, redeliver)


def _outcome(
    message: AssembledMessage | None, ack: list[MessageId], redeliver: list[MessageId]
) -> ChunkOutcome:
    if message is None and not ack and not redeliver:
        return _NOTHING
    return ChunkOutcome(message, tuple(ack), tuple(redeliver))
