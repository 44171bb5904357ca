"""Accepted messages in, SEND operations out: the producer's batching seam.

aiokafka's ``MessageAccumulator`` in two lines: the producer adds messages, and gets back the
operations ready to go on the wire. Two implementations share the ``Accumulator`` protocol:

* ``SingleAccumulator`` (batching off): every message is one entry at once, compressed if a
  codec is set, cut into PIP-37 chunks when chunking is on and it exceeds the broker's
  ``maxMessageSize``.
* ``BatchAccumulator`` (batching on): messages collect in a ``batching.BatchBuilder`` until
  its count or size trigger fires, its delay trigger passes (``deadline``; the producer runs
  the timer and calls ``drain``), or ``drain`` is called by ``flush``/``close``. A delayed
  message (``deliver_at``) always travels alone, after the batch in progress.

The entries themselves are built by the pure ``client.batching`` / ``client.chunking`` code;
this module only pairs them with the senders' futures and the frame the pending queue keeps.
No I/O and no clocks: the producer passes the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from client.batching import (
    BatchBuilder,
    OutgoingMessage,
    SendEncoder,
    compress_payload,
    message_metadata,
)
from client.chunking import ChunkingError, split_into_chunks
from client.errors import MessageTooBig
from client.pending import ChunkedSend, Completion, SendOp
from protocol.enums import CompressionType

__all__ = ["Accumulator", "BatchAccumulator", "EntryContext", "SingleAccumulator"]


@dataclass(frozen=True, slots=True)
class EntryContext:
    """What every entry of one producer needs.

    Attributes:
        producer_id: the SEND's producer id.
        producer_name: the name the broker confirmed (stamped in every entry's metadata).
        codec: compression of each entry's payload.
        schema_version: from PRODUCER_SUCCESS, stamped in every entry when present.
        max_message_size: the current connection's limit (CONNECTED.max_message_size).
    """

    producer_id: int
    producer_name: str
    codec: CompressionType
    schema_version: bytes | None
    max_message_size: Callable[[], int]


class Accumulator(Protocol):
    """Turns accepted messages into SEND operations (in sequence order)."""

    def add(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        """Accept a message; return the operations ready now (possibly none).

        Raises:
            MessageTooBig: the message can never be sent (nothing was kept).
        """
        ...

    def drain(self) -> list[SendOp]:
        """Everything held, as operations (delay timer, ``flush``, ``close``)."""
        ...

    @property
    def deadline(self) -> int | None:
        """When held messages must go out (ms, the ``now_ms`` clock); None if none held."""
        ...


class SingleAccumulator:
    """Batching off: one entry (or one chunked message) per message, at once."""

    __slots__ = ("_chunking", "_context", "_encoder")

    def __init__(self, context: EntryContext, *, chunking: bool = False) -> None:
        self._context = context
        self._chunking = chunking
        self._encoder = _encoder_for(context)

    @property
    def deadline(self) -> int | None:
        return None

    def drain(self) -> list[SendOp]:
        return []

    def add(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        if self._chunking:
            return self._chunked(message, future, now_ms)
        # batching.encode_message, without its BuiltEntry: this runs once per message.
        encoder = self._encoder
        entry = encoder.entry(message, now_ms)
        _check_size(len(entry) - 4, self._context)
        sequence_id = message.sequence_id
        return [SendOp(sequence_id, encoder.send(sequence_id, entry), [future], sequence_id)]

    def _chunked(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        context = self._context
        metadata = message_metadata(
            message,
            producer_name=context.producer_name,
            publish_time=now_ms,
            schema_version=context.schema_version,
        )
        payload = compress_payload(metadata, message.payload, context.codec)
        try:
            chunks = split_into_chunks(metadata, payload, context.max_message_size())
        except ChunkingError as exc:
            raise MessageTooBig(str(exc)) from None
        sequence_id = message.sequence_id
        if len(chunks) == 1:
            return [SendOp(sequence_id, chunks[0].send(context.producer_id), [future], sequence_id)]
        shared = ChunkedSend()
        return [
            SendOp(
                sequence_id,
                chunk.send(context.producer_id),
                [future] if chunk.is_last else [],
                sequence_id,
                permits=1 if chunk.is_last else 0,
                chunks=shared,
            )
            for chunk in chunks
        ]


class BatchAccumulator:
    """Batching on: messages collect into batch entries (``batching.BatchBuilder``)."""

    __slots__ = ("_builder", "_context", "_encoder", "_futures", "_single")

    def __init__(self, context: EntryContext, builder: BatchBuilder) -> None:
        self._context = context
        self._builder = builder
        self._encoder = _encoder_for(context)
        self._futures: list[Completion] = []
        self._single = SingleAccumulator(context)

    @property
    def deadline(self) -> int | None:
        return self._builder.deadline

    def add(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        if not message.is_batchable:
            # A delayed message goes alone, after the batch in progress (sequence order).
            return [*self.drain(), *self._single.add(message, future, now_ms)]
        refuse_oversized(self._context, message)
        ops: list[SendOp] = []
        builder = self._builder
        try:
            accepted = builder.add(message, now_ms)
        except ValueError:  # a sequence id not above the batch's last: start a new batch
            accepted = False
        if not accepted:
            ops += self.drain()
            builder.add(message, now_ms)
        self._futures.append(future)
        if builder.is_full:
            ops += self.drain()
        return ops

    def drain(self) -> list[SendOp]:
        if not len(self._builder):
            return []
        context = self._context
        built = self._builder.build(
            producer_name=context.producer_name,
            codec=context.codec,
            schema_version=context.schema_version,
        )
        futures, self._futures = self._futures, []
        op = SendOp(
            built.sequence_id,
            self._encoder.batch_send(built),
            futures,
            built.highest_sequence_id,
            permits=len(futures),
            is_batch=True,
        )
        limit = context.max_message_size()
        if len(built.entry) - 4 > limit:
            op.fail(MessageTooBig(f"batch of {len(built.entry)} bytes exceeds {limit}"))
            op.frame = b""  # the producer releases the permits and sends nothing
        return [op]


def _encoder_for(context: EntryContext) -> SendEncoder:
    return SendEncoder(
        context.producer_id,
        producer_name=context.producer_name,
        codec=context.codec,
        schema_version=context.schema_version,
    )


def _check_size(size: int, context: EntryContext) -> None:
    limit = context.max_message_size()
    if size > limit:
        raise MessageTooBig(
            f"message of {size} bytes (metadata and payload) exceeds the broker's limit "
            f"{limit}; enable chunking to send it"
        )


def refuse_oversized(context: EntryContext, message: OutgoingMessage) -> None:
    """Raises ``MessageTooBig`` for a payload that alone exceeds the broker's limit: it can join
    no batch, and nothing is kept of it."""
    limit = context.max_message_size()
    if len(message.payload) > limit:
        raise MessageTooBig(
            f"message of {len(message.payload)} bytes exceeds the broker's limit {limit}"
        )
