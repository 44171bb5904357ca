"""``AsyncReader``: reads a topic from a chosen message id, without a durable subscription.

A reader is a consumer on a non-durable ``reader-<10 hex>`` subscription created at
``start_message_id`` (the broker delivers from that entry, inclusive); ``AsyncConsumer``
filters out what precedes the start, inside batches too, honouring
``start_message_id_inclusive`` as the official clients do. After a reconnection it resumes
after the last message it handed out.

A reader at ``latest`` with ``start_message_id_inclusive`` starts at the topic's last message
(``include_head``), as the Java client's does at once; the C++ one only moves there once
``has_message_available()`` is called (``read_next`` alone times out there), so both ways read
the last message here.

``has_message_available()`` follows the C++ client: a queued message answers yes at once;
otherwise GET_LAST_MESSAGE_ID is compared with the last message read (or, before any, with the
start id; a reader started at ``latest`` compares the subscription's mark-delete position).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from client.consumer import AsyncConsumer
from client.errors import AlreadyClosed
from client.message import Message
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer

__all__ = ["AsyncMultiTopicReader", "AsyncReader"]

_LATEST = MessageId.latest
C = TypeVar("C", AsyncConsumer, AsyncMultiTopicConsumer)


class _Reader(Generic[C]):
    """What every reader does through its (non-durable) consumer."""

    def __init__(self, consumer: C) -> None:
        self._consumer: C = consumer

    def topic(self) -> str:
        return self._consumer.topic()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``Timeout`` when none comes within ``timeout_millis``."""
        return await self._consumer.receive(timeout_millis)

    async def seek(self, messageid: MessageId | int) -> None:
        """Move to a message id or a publish time (ms since the epoch); on several partitions
        see ``AsyncMultiTopicConsumer.seek``."""
        await self._consumer.seek(messageid)

    async def close(self) -> None:
        await self._consumer.close()

    def __aiter__(self) -> _Reader[C]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self._consumer.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    @property
    def consumer(self) -> C:
        return self._consumer

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self.topic()}>"


class AsyncReader(_Reader[AsyncConsumer]):
    """A reader of one topic; create it with ``AsyncClient.create_reader``."""

    async def has_message_available(self) -> bool:
        """Whether ``read_next`` would return a message without waiting for a new one."""
        consumer = self._consumer
        if consumer.queued:
            return True
        last, mark_delete = await consumer.last_message_id_and_mark_delete()
        if consumer.queued:
            return True
        if last.entry_id < 0:
            return False
        last_key = (last.ledger_id, last.entry_id, last.batch_index)
        seen = consumer.last_dequeued
        if seen is not None:
            return last_key > (seen.ledger_id(), seen.entry_id(), seen.batch_index())
        start = consumer.start_message_id or MessageId.earliest
        if start == _LATEST:
            if mark_delete is None:
                return False
            return (last.ledger_id, last.entry_id) > (mark_delete.ledger_id, mark_delete.entry_id)
        start_key = (start.ledger_id(), start.entry_id(), start.batch_index())
        if consumer.start_inclusive:
            return last_key >= start_key
        return last_key > start_key

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (entry id -1 when it is empty)."""
        return await self._consumer.get_last_message_id()

    async def include_head(self) -> None:
        """Started at ``latest``, inclusive: move to the last message, so it is read first
        (nothing to do on an empty topic)."""
        consumer = self._consumer
        if consumer.start_message_id == _LATEST and consumer.start_inclusive:
            last = await consumer.get_last_message_id()
            if last.entry_id() >= 0:
                await consumer.seek(last)


class AsyncMultiTopicReader(_Reader[AsyncMultiTopicConsumer]):
    """A reader of every partition of a partitioned topic (as the Java ``MultiTopicsReaderImpl``):
    one reader per partition, their messages merged; create it with
    ``AsyncClient.create_reader`` on a partitioned topic."""

    async def has_message_available(self) -> bool:
        """Whether a merged message is waiting or some partition has one to read."""
        if self._consumer.queued:
            return True
        for child in self._consumer.consumers():
            if await AsyncReader(child).has_message_available():
                return True
        return bool(self._consumer.queued)
