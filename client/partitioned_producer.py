"""``AsyncPartitionedProducer``: one producer over every partition of a partitioned topic.

As the official ``PartitionedProducerImpl``: one ``AsyncProducer`` per partition
(``<topic>-partition-<i>``), all with the same options and the same producer name when one is
given (so PIP-6 deduplication and PIP-68 access modes apply per partition, as in Pulsar), and a
router (``client.routing``) choosing the partition of each message. Each partition keeps its own
sequence ids and its own effectively-once resend queue. ``max_pending_messages`` per partition
is ``min(max_pending_messages, max_pending_messages_across_partitions / partitions)``.

The partition count is checked again every ``partitions_update_interval`` seconds; new
partitions get producers and start receiving messages (a partition count never shrinks in
Pulsar). ``last_sequence_id()`` is the highest over the partitions and ``producer_name()`` the
first partition's, as in the C++ client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from client.batching import OutgoingMessage
from client.errors import AlreadyClosed, PulsarException
from client.pending import Completion
from client.producer import AsyncProducer, PayloadEncoder, ProducerConfig, SendApi
from client.routing import Router
from protocol.topic_name import TopicName

__all__ = ["AsyncPartitionedProducer"]

logger = logging.getLogger(__name__)

StartProducer = Callable[[str, ProducerConfig], Awaitable[AsyncProducer]]
CountPartitions = Callable[[str], Awaitable[int]]


class AsyncPartitionedProducer(SendApi):
    """A producer of a partitioned topic; ``AsyncClient.create_producer`` makes one when the
    topic has partitions."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        config: ProducerConfig,
        router: Router,
        start_producer: StartProducer,
        count_partitions: CountPartitions,
        *,
        max_pending_across_partitions: int,
        update_interval: float,
    ) -> None:
        self._topic = topic
        self._partitions = partitions
        self._config = config
        self._router = router
        self._start_producer = start_producer
        self._count_partitions = count_partitions
        self._max_pending_across = max_pending_across_partitions
        self._update_interval = update_interval
        self._producers: list[AsyncProducer] = []
        self._updates: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Create the producer of every partition (all or nothing)."""
        try:
            await self._grow_to(self._partitions)
        except BaseException:
            await self.close()
            raise
        if self._update_interval > 0:
            self._updates = asyncio.get_running_loop().create_task(self._update_forever())

    # --- what the application sees ------------------------------------------------------

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._producers[0].producer_name() if self._producers else ""

    def last_sequence_id(self) -> int:
        """The highest sequence id acknowledged on any partition (-1 if none yet)."""
        return max((p.last_sequence_id() for p in self._producers), default=-1)

    def is_connected(self) -> bool:
        return bool(self._producers) and all(p.is_connected() for p in self._producers)

    def partitions(self) -> int:
        """The number of partitions this producer writes to now."""
        return len(self._producers)

    def _schema(self) -> PayloadEncoder | None:
        return self._config.schema

    def _target(self, message: OutgoingMessage) -> AsyncProducer:
        return self._route(message)

    def enqueue_to(
        self, completion: Completion, message: OutgoingMessage, sequence_id: int | None = None
    ) -> None:
        """Queue a prepared message on its partition now (the blocking facade's path)."""
        self._route(message).enqueue_to(completion, message, sequence_id)

    async def flush(self) -> None:
        """Flush every partition."""
        self._check_open()
        await asyncio.gather(*(p.flush() for p in self._producers))

    async def close(self) -> None:
        """Close every partition's producer (each delivers what it has pending first)."""
        if self._closed:  # as the official (and AsyncProducer): a second close says so
            raise AlreadyClosed(f"producer on {self._topic} is already closed")
        self._closed = True
        task, self._updates = self._updates, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(p.close() for p in self._producers))

    # --- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"producer on {self._topic} is closed")

    def _route(self, message: OutgoingMessage) -> AsyncProducer:
        self._check_open()
        return self._producers[self._router.choose(message, len(self._producers))]

    async def _grow_to(self, partitions: int) -> None:
        per_partition = max(
            1, min(self._config.max_pending_messages, self._max_pending_across // partitions)
        )
        config = dataclasses.replace(self._config, max_pending_messages=per_partition)
        base = TopicName.parse(self._topic)
        names = [base.with_partition(i).full_name for i in range(len(self._producers), partitions)]
        started = await asyncio.gather(
            *(self._start_producer(name, config) for name in names), return_exceptions=True
        )
        failed = [result for result in started if isinstance(result, BaseException)]
        ready = [result for result in started if isinstance(result, AsyncProducer)]
        if failed:
            await asyncio.gather(*(p.close() for p in ready), return_exceptions=True)
            raise failed[0]
        self._producers.extend(ready)

    async def _update_forever(self) -> None:
        while True:
            await asyncio.sleep(self._update_interval)
            try:
                partitions = await self._count_partitions(self._topic)
                if partitions > len(self._producers):
                    logger.info(
                        "%s: %d -> %d partitions", self._topic, len(self._producers), partitions
                    )
                    await self._grow_to(partitions)
            except PulsarException as exc:
                logger.warning("%s: partition update failed, retrying later: %r", self, exc)

    def __repr__(self) -> str:
        return f"<AsyncPartitionedProducer on {self._topic} ({len(self._producers)} partitions)>"
