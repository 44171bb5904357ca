"""``MultiTopicConsumer``: the blocking consumer of several topics (a list, a pattern or a
partitioned topic).

It is the blocking ``Consumer`` with one difference: an acknowledgement is checked in the
calling thread before it goes to the loop. The blocking consumer hands acknowledgements to the
loop without waiting, so an id the multi-topic consumer cannot route (one naming no topic of
it, such as the id a send returns) would be refused there, out of the caller's sight; the
official client raises ``OperationNotSupported`` to the caller, and so does this.
"""

from __future__ import annotations

from client.message import Message
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer
from client.sync.consumer import Consumer, MessageListener
from client.sync.runner import Runner

__all__ = ["MultiTopicConsumer"]


class MultiTopicConsumer(Consumer):
    """A blocking ``Consumer`` over an ``AsyncMultiTopicConsumer`` (see the module docstring)."""

    def __init__(
        self,
        runner: Runner,
        consumer: AsyncMultiTopicConsumer,
        message_listener: MessageListener | None = None,
        *,
        shared: bool = False,
    ) -> None:
        super().__init__(runner, consumer, message_listener, shared=shared)
        self._multi = consumer

    def acknowledge(self, message: Message | MessageId) -> None:
        """Raises:
        OperationNotSupported: an id naming no topic of this consumer (as the official).
        """
        self._routable(message)
        super().acknowledge(message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Raises:
        OperationNotSupported: an id naming no topic of this consumer (checked first, as the
            official multi-topic consumer does).
        CumulativeAcknowledgementNotAllowedError: a Shared or Key_Shared subscription.
        """
        self._routable(message)
        super().acknowledge_cumulative(message)

    def _routable(self, message: Message | MessageId) -> None:
        # Anything else is left to Consumer, which raises TypeError for it.
        if isinstance(message, (Message, MessageId)):
            self._multi.route(message)
