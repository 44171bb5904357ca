"""``Producer`` of ``client.asyncio``: the official ``pulsar.asyncio.Producer`` over ours.

Coroutines and plain methods are split as in the official module (``send``, ``flush``,
``close`` are awaited; ``topic()``, ``producer_name()``, ``last_sequence_id()``,
``is_connected()`` are not), and every error is a ``PulsarException``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from client.asyncio.errors import PulsarException, translated
from client.asyncio.lifecycle import ClientState
from client.errors import Result
from client.message_id import MessageId
from client.partitioned_producer import AsyncPartitionedProducer
from client.producer import AsyncProducer

__all__ = ["Producer"]


class Producer:
    """Publishes messages on a topic; create it with ``Client.create_producer``."""

    def __init__(
        self, producer: AsyncProducer | AsyncPartitionedProducer, state: ClientState
    ) -> None:
        self._producer = producer
        self._state = state
        self._closed = False

    async def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish ``content`` (encoded by the producer's schema); its id once stored.

        Raises:
            PulsarException: ``MessageTooBig``, ``Timeout``, ``AlreadyClosed``, ...
        """
        self._state.check_open()
        with translated():
            sent = await self._producer.send_async(
                content,
                properties,
                partition_key,
                ordering_key,
                sequence_id,
                replication_clusters,
                bool(disable_replication),
                event_timestamp,
                deliver_at,
                deliver_after,
            )
            return await self._state.wait_for(sent)

    async def flush(self) -> None:
        """Send what the batch holds; return once every message sent so far is answered."""
        self._state.check_open()
        with translated():
            await self._producer.flush()

    async def close(self) -> None:
        """Close the producer (pending messages are delivered first, see ``AsyncProducer``).

        Raises:
            PulsarException: ``AlreadyClosed`` when it (or its client) is already closed, as
                the official producer answers a second close.
        """
        if self._closed or self._state.closed:
            raise PulsarException(Result.AlreadyClosed, "the producer is already closed")
        self._closed = True
        with translated():
            await self._producer.close()

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        """The last sequence id the broker acknowledged (-1 before any)."""
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        # Shutdown closes the sockets in the background; the answer changes at once.
        return not self._state.closed and self._producer.is_connected()

    def __repr__(self) -> str:
        return f"<client.asyncio.Producer {self._producer!r}>"
