"""``BatchingType.KeyBased``: one batch per key, the official key-based batch container.

A Key_Shared subscription routes a batch entry whole, by the keys in its metadata (the first
message's), so a batch mixing keys would hand some messages to a consumer that does not own
their key. The key-based container keeps one batch per key (the ordering key, else the partition
key; messages with neither share one batch) and sends them all together when a trigger fires.

Triggers are the container's, over all its batches together, as in the official clients: the
message count, the payload bytes, the publish delay since the oldest held message, and also a
sequence id not above the highest held (an explicit id going back: what is held goes first, so
sequence ids stay in order across drains).

Sequence ids: messages of different keys interleave (key A: 0, 3, 4; key B: 1, 2), so the batches
cannot each be named by their first id in order. As the Java client does, each batch goes out
named by its *highest* id (A as 4, B as 2), the batches sorted by it, so the broker's PIP-6 dedup
sees increasing ids; each message keeps its own id inside the batch. The price (Java's too): a
producer resuming from ``last_sequence_id()`` after a crash between two batches of one drain
resumes after the higher one, so prefer ``BatchingType.Default`` where the resume point must be
exact.

No I/O and no clocks, like ``client.accumulator``, whose ``Accumulator`` protocol this keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from client.accumulator import EntryContext, SingleAccumulator, refuse_oversized
from client.batching import BatchBuilder, OutgoingMessage, SendEncoder
from client.errors import MessageTooBig
from client.pending import Completion, SendOp

__all__ = ["KeyBasedAccumulator", "batch_key"]


def batch_key(message: OutgoingMessage) -> bytes | None:
    """The key a message is batched by: what the broker's Key_Shared dispatch hashes."""
    if message.ordering_key is not None:
        return message.ordering_key
    if message.partition_key is not None:
        return message.partition_key.encode()
    return None


@dataclass(slots=True)
class _KeyBatch:
    builder: BatchBuilder
    futures: list[Completion] = field(default_factory=list)


class KeyBasedAccumulator:
    """Batching on, grouped by key: one ``BatchBuilder`` per key, drained together."""

    __slots__ = (
        "_batches",
        "_context",
        "_count",
        "_encoder",
        "_first_added_at",
        "_highest_sequence_id",
        "_single",
        "_size",
        "max_bytes",
        "max_messages",
        "max_publish_delay_ms",
    )

    def __init__(
        self,
        context: EntryContext,
        *,
        max_messages: int,
        max_bytes: int,
        max_publish_delay_ms: int,
    ) -> None:
        if max_messages < 1 or max_bytes < 1 or max_publish_delay_ms < 0:
            raise ValueError("batch limits must be positive and the publish delay not negative")
        self._context = context
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_publish_delay_ms = max_publish_delay_ms
        self._encoder = SendEncoder(
            context.producer_id,
            producer_name=context.producer_name,
            codec=context.codec,
            schema_version=context.schema_version,
        )
        self._single = SingleAccumulator(context)
        self._batches: dict[bytes | None, _KeyBatch] = {}
        self._count = 0
        self._size = 0
        self._first_added_at = 0
        self._highest_sequence_id = -1

    def __len__(self) -> int:
        """Messages held, over all keys."""
        return self._count

    @property
    def deadline(self) -> int | None:
        """When the oldest held message must go (ms, the ``now_ms`` clock); None if none."""
        if not self._count:
            return None
        return self._first_added_at + self.max_publish_delay_ms

    def add(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        """Hold ``message`` in its key's batch; return what a trigger sends now.

        Raises:
            MessageTooBig: the payload alone exceeds the broker's limit (nothing was kept).
        """
        if not message.is_batchable:
            # A delayed message goes alone, after everything held (sequence order).
            return [*self.drain(), *self._single.add(message, future, now_ms)]
        refuse_oversized(self._context, message)
        ops: list[SendOp] = []
        if self._count and message.sequence_id <= self._highest_sequence_id:
            ops += self.drain()
        key = batch_key(message)
        batch = self._batches.get(key)
        if batch is None:
            batch = _KeyBatch(self._new_builder())
        before = batch.builder.size
        if self._count and not self._fits(batch, message, now_ms):
            ops += self.drain()
            batch = _KeyBatch(self._new_builder())
            before = 0
        if not batch.builder.add(message, now_ms):  # never refused by an empty builder
            raise AssertionError("a key batch refused a message the container had room for")
        if not self._count:
            self._first_added_at = now_ms
        self._batches[key] = batch
        batch.futures.append(future)
        self._count += 1
        self._size += batch.builder.size - before
        self._highest_sequence_id = message.sequence_id
        if self._count >= self.max_messages or self._size >= self.max_bytes:
            ops += self.drain()
        return ops

    def _fits(self, batch: _KeyBatch, message: OutgoingMessage, now_ms: int) -> bool:
        """Whether the container has room for ``message`` (count and bytes over all keys)."""
        if self._count >= self.max_messages:
            return False
        probe = self._new_builder()
        probe.add(message, now_ms)  # the message's record size, as its batch would count it
        return self._size + probe.size <= self.max_bytes

    def _new_builder(self) -> BatchBuilder:
        # Each key's builder may hold everything: the container enforces the limits.
        return BatchBuilder(
            max_messages=self.max_messages,
            max_bytes=self.max_bytes,
            max_publish_delay_ms=self.max_publish_delay_ms,
        )

    def drain(self) -> list[SendOp]:
        """Every key's batch as a SEND, ordered by the highest sequence id each carries."""
        if not self._count:
            return []
        context = self._context
        limit = context.max_message_size()
        ops: list[SendOp] = []
        for batch in self._batches.values():
            built = batch.builder.build(
                producer_name=context.producer_name,
                codec=context.codec,
                schema_version=context.schema_version,
                publish_time=self._first_added_at,
                identify_by_highest=True,
            )
            op = SendOp(
                built.sequence_id,
                self._encoder.batch_send(built),
                batch.futures,
                built.highest_sequence_id,
                permits=len(batch.futures),
                is_batch=True,
            )
            if len(built.entry) - 4 > limit:
                op.fail(MessageTooBig(f"batch of {len(built.entry)} bytes exceeds {limit}"))
                op.frame = b""  # the producer releases the permits and sends nothing
            ops.append(op)
        self._batches = {}
        self._count = 0
        self._size = 0
        self._highest_sequence_id = -1
        ops.sort(key=lambda op: op.sequence_id)
        return ops
