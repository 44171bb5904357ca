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
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client.errors import ConsumerBusy, InvalidConfiguration
from client.message import Message
from protocol.enums import InitialPosition, SubType

if TYPE_CHECKING:
    from client.client import AsyncClient
    from client.partitioned_producer import AsyncPartitionedProducer
    from client.producer import AsyncProducer

__all__ = ["ConsumerDeadLetterPolicy", "DeadLetterPolicy", "DeadLetterSender"]

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
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise InvalidConfiguration("max_redeliver_count must be greater than 0")

    def topic_for(self, topic: str, subscription: str) -> str:
        """The dead-letter topic of ``subscription`` on ``topic``."""
        return self.dead_letter_topic or f"{topic}-{subscription}-DLQ"


DeadLetterPolicy = ConsumerDeadLetterPolicy
"""The Java/PIP name of the same policy."""

_DEAD_LETTER_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})


class DeadLetterSender:
    """A consumer's side of the policy: which messages are due, and their publication."""

    def __init__(
        self,
        client: AsyncClient,
        policy: ConsumerDeadLetterPolicy,
        topic: str,
        subscription: str,
    ) -> None:
        self.policy = policy
        self.topic = policy.topic_for(topic, subscription)
        self._client = client
        self._source_topic = topic
        self._producer: AsyncProducer | AsyncPartitionedProducer | None = None
        self._creating = asyncio.Lock()

    @staticmethod
    def applies_to(consumer_type: SubType) -> bool:
        return consumer_type in _DEAD_LETTER_TYPES

    def is_last_delivery(self, message: Message) -> bool:
        """Whether the next redelivery of ``message`` goes to the dead-letter topic instead."""
        return message.redelivery_count() >= self.policy.max_redeliver_count

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

    async def _get_producer(self) -> AsyncProducer | AsyncPartitionedProducer:
        async with self._creating:
            if self._producer is None:
                subscription = self.policy.initial_subscription_name
                if subscription is not None:
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
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.close()
