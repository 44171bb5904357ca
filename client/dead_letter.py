"""Dead-letter topic: where a consumer puts a message redelivered too many times.

As the official clients do (C++ ``ConsumerImpl::processPossibleToDLQ``, Java
``ConsumerImpl.processPossibleToDLQ``): a message that arrives with ``redelivery_count >=
max_redeliver_count`` is handed to the application one last time and remembered; when it is
due for redelivery again (negative ack or unacked timeout) the consumer publishes it to the
dead-letter topic instead, with the ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` properties the
official clients add, and acknowledges it once the dead-letter topic stored it. If that
publication fails, the message is redelivered as usual (it is never acknowledged unsent).

The dead-letter producer is created on the first message that needs it, and is owned (and
closed) by the consumer. With ``initial_subscription_name`` that subscription is created on
the dead-letter topic first, at the earliest position, so nothing sent there is lost before
someone subscribes (by a Shared consumer that subscribes and closes: our producer does not
send the PRODUCER command's ``initial_subscription_name`` yet). Like the official clients,
this applies to Shared and Key_Shared subscriptions only: Exclusive and Failover redeliver by
rewinding the whole subscription. In a batch, only the messages not acknowledged are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from client.acks import EntryKey
from client.arguments import check_type
from client.errors import AlreadyClosed, ConsumerBusy
from client.message import Message
from client.message_id import MessageId
from protocol.enums import InitialPosition, SubType

__all__ = [
    "ConsumerDeadLetterPolicy",
    "DeadLetterClient",
    "DeadLetterPolicy",
    "DeadLetterSender",
]

logger = logging.getLogger(__name__)

#: Properties the official clients set on a dead-lettered message.
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


@dataclass(frozen=True, slots=True)
class ConsumerDeadLetterPolicy:
    """The official ``pulsar.ConsumerDeadLetterPolicy``.

    Args:
        max_redeliver_count: redeliveries after which a message goes to the dead-letter topic
            (> 0).
        dead_letter_topic: default ``<topic>-<subscription>-DLQ``.
        initial_subscription_name: a subscription to create on the dead-letter topic.
    """

    max_redeliver_count: int
    # "" means unset, as the official getters answer (None is taken as unset too).
    dead_letter_topic: str | None = ""
    initial_subscription_name: str | None = ""

    def __post_init__(self) -> None:
        # ValueError, as the official (the C++ policy builder refuses it as an argument).
        check_type(int, self.max_redeliver_count, "max_redeliver_count")
        if self.max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be greater than 0")

    def topic_for(self, topic: str, subscription: str) -> str:
        """The dead-letter topic of ``subscription`` on ``topic``."""
        return self.dead_letter_topic or f"{topic}-{subscription}-DLQ"


DeadLetterPolicy = ConsumerDeadLetterPolicy
"""The Java/PIP name of the same policy."""

_DEAD_LETTER_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})


class DeadLetterProducer(Protocol):
    """What the sender needs of the producer of the dead-letter topic."""

    async def send_async(
        self,
        content: Any,
        properties: Mapping[str, str] | None = ...,
        partition_key: str | None = ...,
        ordering_key: str | bytes | None = ...,
        *,
        event_timestamp: int | None = ...,
    ) -> asyncio.Future[MessageId]: ...

    async def close(self) -> None: ...


class _Closable(Protocol):
    async def close(self) -> None: ...


class DeadLetterClient(Protocol):
    """What the sender needs of the client (``AsyncClient``): a producer on the dead-letter
    topic, and a subscription created on it."""

    async def create_producer(self, topic: str) -> DeadLetterProducer: ...

    async def subscribe(
        self,
        topic: str,
        subscription_name: str,
        *,
        consumer_type: SubType | int = ...,
        initial_position: InitialPosition | int = ...,
    ) -> _Closable: ...


class DeadLetterSender:
    """A consumer's side of the policy: which messages are due, and their publication.

    A message handed out on its last delivery is remembered by entry (``handed_out``) until it
    is acknowledged (``forget``, ``forget_message``) or due for redelivery, when ``send_due``
    publishes it instead and reports the outcome to the consumer.
    """

    def __init__(
        self,
        client: DeadLetterClient,
        policy: ConsumerDeadLetterPolicy,
        topic: str,
        subscription: str,
    ) -> None:
        self.policy = policy
        self.topic = policy.topic_for(topic, subscription)
        self._client = client
        self._source_topic = topic
        self._producer: DeadLetterProducer | None = None
        self._creating = asyncio.Lock()
        self._last_deliveries: dict[EntryKey, list[Message]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    @staticmethod
    def applies_to(consumer_type: SubType) -> bool:
        return consumer_type in _DEAD_LETTER_TYPES

    def is_last_delivery(self, message: Message) -> bool:
        """Whether the next redelivery of ``message`` goes to the dead-letter topic instead."""
        return message.redelivery_count() >= self.policy.max_redeliver_count

    def handed_out(self, key: EntryKey, message: Message) -> None:
        """``message`` (of entry ``key``) reached the application."""
        if self.is_last_delivery(message):
            self._last_deliveries.setdefault(key, []).append(message)

    def forget(self, key: EntryKey) -> None:
        """The entry was acknowledged: nothing of it goes to the dead-letter topic."""
        if self._last_deliveries:
            self._last_deliveries.pop(key, None)

    def forget_message(self, key: EntryKey, batch_index: int) -> None:
        """An acknowledged message of a batch is not dead-lettered with its entry."""
        messages = self._last_deliveries.get(key)
        if messages:
            kept = [m for m in messages if m.message_id().batch_index() != batch_index]
            if kept:
                self._last_deliveries[key] = kept
            else:
                del self._last_deliveries[key]

    def send_due(
        self,
        due: list[EntryKey],
        on_stored: Callable[[list[Message]], None],
        on_failed: Callable[[EntryKey, Exception], None],
    ) -> list[EntryKey]:
        """Start publishing the entries of ``due`` on their last delivery; the others are
        returned, to be redelivered. Once the dead-letter topic stored an entry's messages
        ``on_stored(messages)`` runs (the consumer acknowledges them); if that fails,
        ``on_failed(key, error)`` (the consumer has it redelivered: never acknowledged unsent).
        """
        rest = []
        for key in dict.fromkeys(due):
            messages = self._last_deliveries.pop(key, None)
            if messages is None:
                rest.append(key)
                continue
            self.send_now(key, messages, on_stored, on_failed)
        return rest

    def send_now(
        self,
        key: EntryKey,
        messages: list[Message],
        on_stored: Callable[[list[Message]], None],
        on_failed: Callable[[EntryKey, Exception], None],
    ) -> None:
        """Start publishing ``messages`` (of entry ``key``), reported as ``send_due`` does: for
        an entry that arrived redelivered more than the policy allows."""
        self._last_deliveries.pop(key, None)
        task = asyncio.get_running_loop().create_task(
            self._send_then(key, messages, on_stored, on_failed)
        )
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_then(
        self,
        key: EntryKey,
        messages: list[Message],
        on_stored: Callable[[list[Message]], None],
        on_failed: Callable[[EntryKey, Exception], None],
    ) -> None:
        try:
            await self.send(messages)
        except Exception as exc:
            on_failed(key, exc)
            return
        on_stored(messages)

    async def send(self, messages: list[Message]) -> None:
        """Publish ``messages`` to the dead-letter topic; returns once all are stored."""
        producer = await self._get_producer()
        futures = []
        for message in messages:
            properties = dict(message.properties())
            properties.setdefault(REAL_TOPIC, self._source_topic)
            properties.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id()))
            futures.append(
                await producer.send_async(
                    message.data(),
                    properties=properties,
                    partition_key=message.partition_key() or None,
                    ordering_key=message.ordering_key() or None,
                    event_timestamp=message.event_timestamp() or None,
                )
            )
        await asyncio.gather(*futures)

    async def _get_producer(self) -> DeadLetterProducer:
        async with self._creating:
            if self._producer is None:
                subscription = self.policy.initial_subscription_name
                if subscription:
                    await self._create_subscription(subscription)
                self._producer = await self._client.create_producer(self.topic)
            return self._producer

    async def _create_subscription(self, subscription: str) -> None:
        try:
            consumer = await self._client.subscribe(
                self.topic,
                subscription,
                consumer_type=SubType.Shared,
                initial_position=InitialPosition.Earliest,
            )
        except ConsumerBusy:
            return  # it exists already, with a consumer of another type on it
        await consumer.close()

    async def close(self) -> None:
        """Stop publications in progress (their messages are redelivered), close the producer."""
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None:
            # Closing the client may have closed it first (a second close raises).
            with contextlib.suppress(AlreadyClosed):
                await producer.close()
