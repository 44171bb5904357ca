"""``Consumer`` of ``client.asyncio``: the official ``pulsar.asyncio.Consumer`` over ours.

As in the official module, ``receive``, the three acknowledgements, ``unsubscribe``, ``seek``,
``close`` and ``get_last_message_id`` are coroutines; ``redeliver_unacknowledged_messages``,
``topic()``, ``subscription_name()`` and ``consumer_name()`` are plain.
"""

from __future__ import annotations

import contextlib

from client.asyncio.errors import translated
from client.asyncio.lifecycle import ClientState
from client.consumer import AsyncConsumer
from client.errors import OperationNotSupported, PulsarException
from client.message import Message
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer

__all__ = ["Consumer"]


class Consumer:
    """Receives messages of a subscription; create it with ``Client.subscribe``."""

    def __init__(
        self,
        consumer: AsyncConsumer | AsyncMultiTopicConsumer,
        state: ClientState,
    ) -> None:
        self._consumer = consumer
        self._state = state

    async def receive(self) -> Message:
        """The next message (waits as long as it takes).

        Raises:
            PulsarException: ``AlreadyClosed`` once the consumer or its client is closed.
        """
        self._state.check_open()
        with translated():
            return await self._consumer.receive()

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent grouped, as the official client does)."""
        self._state.check_open()
        with translated():
            self._consumer.acknowledge(message)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one.

        Raises:
            PulsarException: ``CumulativeAcknowledgementNotAllowedError`` on Shared and
                Key_Shared subscriptions.
        """
        self._state.check_open()
        with translated():
            self._consumer.acknowledge_cumulative(message)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message delivered again after ``negative_ack_redelivery_delay_ms``."""
        self._state.check_open()
        with translated():
            self._consumer.negative_acknowledge(message)

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close the consumer."""
        self._state.check_open()
        with translated():
            await self._consumer.unsubscribe()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id (read again only with
        ``start_message_id_inclusive``) or a publish time (ms since the epoch).

        Raises:
            ValueError: ``messageid`` is neither a ``MessageId`` nor an ``int``.
        """
        if not isinstance(messageid, MessageId | int):
            raise ValueError(f"invalid messageid type {type(messageid)}")
        self._state.check_open()
        with translated():
            await self._consumer.seek(messageid)

    async def close(self) -> None:
        """Close the consumer; closing it again does nothing (the C++ consumer answers Ok)."""
        with translated():
            await self._consumer.close()

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message.

        Raises:
            PulsarException: ``OperationNotSupported`` on several topics, as the C++
                multi-topics consumer answers.
        """
        self._state.check_open()
        with translated():
            consumer = self._consumer
            if not isinstance(consumer, AsyncConsumer):
                raise OperationNotSupported("get_last_message_id of a multi-topics consumer")
            return await consumer.get_last_message_id()

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to deliver again every message not acknowledged yet; never raises
        (a closed consumer has nothing to redeliver)."""
        if self._state.closed:
            return
        with contextlib.suppress(PulsarException):
            self._consumer.redeliver_unacknowledged_messages()

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        """The name given to ``subscribe``, else the one made up for it."""
        return self._consumer.consumer_name()

    def __repr__(self) -> str:
        return f"<client.asyncio.Consumer {self._consumer!r}>"
