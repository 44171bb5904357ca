"""Which partition of a partitioned topic a message goes to, as the official clients decide.

``PartitionsRoutingMode`` carries the official names and values. The routers follow the C++
client's ``RoundRobinMessageRouter`` and ``SinglePartitionMessageRouter``:

* a message with a partition key goes to ``murmur3_32_hash(key) % partitions`` in every mode
  (Pulsar's cross-language ``Murmur3_32Hash`` scheme; the C++ client's default, ``BoostHash``,
  depends on the Boost version it was built with, so no other client can reproduce it);
* ``RoundRobinDistribution`` (the default): without a key, the next partition per message; with
  batching on, the router stays on one partition until a batch would be full (messages, bytes)
  or the batching delay has passed, so batches stay large;
* ``UseSinglePartition``: without a key, one partition picked at random for the producer's life;
* ``CustomPartition``: ``message_router(message, partitions)`` picks (it gets a ``Message``
  built from what is being sent: ``partition_key()``, ``properties()``, ``data()``...).

Routers are plain objects on the event loop: no locks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Protocol

from client.batching import OutgoingMessage, single_metadata
from client.message import Message
from client.message_id import MessageId
from protocol import pb
from protocol.hashing import murmur3_32_hash

__all__ = [
    "MessageRouter",
    "PartitionsRoutingMode",
    "Router",
    "new_router",
]


class PartitionsRoutingMode(IntEnum):
    """The official ``pulsar.PartitionsRoutingMode`` values."""

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


MessageRouter = Callable[[Message, int], int]
"""A custom router: ``(message, number of partitions) -> partition index``."""


class Router(Protocol):
    def choose(self, message: OutgoingMessage, partitions: int) -> int: ...


class _KeyHashRouter:
    """Keyed messages by hash; the subclass decides for the others."""

    def choose(self, message: OutgoingMessage, partitions: int) -> int:
        if partitions == 1:
            return 0
        if message.partition_key is not None:
            return murmur3_32_hash(message.partition_key.encode()) % partitions
        return self._unkeyed(message, partitions)

    def _unkeyed(self, message: OutgoingMessage, partitions: int) -> int:
        raise NotImplementedError


class RoundRobinRouter(_KeyHashRouter):
    """The next partition per message, or per batch when batching is on."""

    def __init__(
        self,
        batching_enabled: bool = False,
        max_batch_messages: int = 1000,
        max_batch_bytes: int = 128 * 1024,
        max_batch_delay_ms: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._batching = batching_enabled
        self._max_messages = max_batch_messages
        self._max_bytes = max_batch_bytes
        self._max_delay = max_batch_delay_ms / 1000
        self._clock = clock
        self._cursor = random.randrange(1 << 16)  # as C++: producers do not all start at 0
        self._messages = 0
        self._bytes = 0
        self._switched_at = clock()

    def _unkeyed(self, message: OutgoingMessage, partitions: int) -> int:
        if not self._batching:
            self._cursor += 1
            return self._cursor % partitions
        size = len(message.payload)
        now = self._clock()
        if (
            self._messages >= self._max_messages
            or size >= self._max_bytes - self._bytes
            or now - self._switched_at >= self._max_delay
        ):
            self._cursor += 1
            self._switched_at = now
            self._messages, self._bytes = 1, size
        else:
            self._messages += 1
            self._bytes += size
        return self._cursor % partitions


class SinglePartitionRouter(_KeyHashRouter):
    """Unkeyed messages all go to one partition, chosen at random once."""

    def __init__(self) -> None:
        self._chosen = random.randrange(1 << 16)

    def _unkeyed(self, message: OutgoingMessage, partitions: int) -> int:
        return self._chosen % partitions


class CustomRouter:
    """The application's ``message_router`` decides, for every message."""

    def __init__(self, route: MessageRouter, topic: str) -> None:
        self._route = route
        self._topic = topic

    def choose(self, message: OutgoingMessage, partitions: int) -> int:
        index = int(self._route(_as_message(message, self._topic), partitions))
        if not 0 <= index < partitions:
            raise ValueError(f"message_router returned {index}, not in [0, {partitions})")
        return index


def new_router(
    mode: PartitionsRoutingMode | int,
    message_router: MessageRouter | None,
    topic: str,
    *,
    batching_enabled: bool,
    max_batch_messages: int,
    max_batch_bytes: int,
    max_batch_delay_ms: int,
) -> Router:
    """The router the official client would use for these producer options: a given
    ``message_router`` wins (as in the Python client), else the mode decides.

    Raises:
        ValueError: ``CustomPartition`` without a ``message_router``.
    """
    if message_router is not None:
        return CustomRouter(message_router, topic)
    mode = PartitionsRoutingMode(int(mode))
    if mode is PartitionsRoutingMode.CustomPartition:
        raise ValueError("CustomPartition routing needs a message_router")
    if mode is PartitionsRoutingMode.UseSinglePartition:
        return SinglePartitionRouter()
    return RoundRobinRouter(
        batching_enabled, max_batch_messages, max_batch_bytes, max_batch_delay_ms
    )


def _as_message(message: OutgoingMessage, topic: str) -> Message:
    # What a router may look at: the per-message fields, as a batch member carries them.
    entry = pb.MessageMetadata(producer_name="", sequence_id=0, publish_time=0)
    header = single_metadata(message.numbered(max(message.sequence_id, 0)))
    return Message(message.payload, MessageId(), topic, entry, header)
