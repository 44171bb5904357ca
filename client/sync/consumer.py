"""``Consumer``: the blocking consumer (``pulsar.Consumer``'s API) over an ``AsyncConsumer``.

``receive`` takes queued messages in the calling thread, without a round trip through the
client's loop (``AsyncConsumer.receiver_queue``), a run of them per lock for a durable
consumer; acknowledgements reach the loop without waiting, a window of them per loop call.
``Client.subscribe`` takes ``SubscribeOptions``' parameters, as ``AsyncClient.subscribe`` does,
then the official ``message_listener`` (``BlockingSubscribeOptions``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from client.arguments import check_type
from client.consumer import AsyncConsumer, SubscribeOptions
from client.consumer.acknowledgements import id_of
from client.errors import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfiguration,
    OperationNotSupported,
    Timeout,
)
from client.message import Message
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer
from client.sync.runner import Runner

__all__ = ["BlockingSubscribeOptions", "Consumer", "MessageListener"]

logger = logging.getLogger(__name__)

MessageListener = Callable[["Consumer", Message], None]


@dataclass(frozen=True, slots=True)
class BlockingSubscribeOptions(SubscribeOptions):
    """``subscribe``'s parameters on the blocking client: ``message_listener`` comes last.

    ``message_listener``: ``listener(consumer, message)`` is called for each message on a
    thread of this consumer's own (``client.sync.listener``); ``receive`` is then refused.
    """

    message_listener: MessageListener | None = None


class Consumer:
    """Blocking consumer (``pulsar.Consumer``'s API) over an ``AsyncConsumer``.

    Acknowledgements are handed to the loop without waiting (as the official ones are
    asynchronous), within 0.5 ms and many at a time; they are sent in the order they were made,
    and before anything this consumer does next that waits for the loop (``close``,
    ``get_last_message_id``...).
    """

    def __init__(
        self,
        runner: Runner,
        consumer: AsyncConsumer | AsyncMultiTopicConsumer,
        message_listener: MessageListener | None = None,
        *,
        shared: bool = False,
    ) -> None:
        self._runner = runner
        self._consumer = consumer
        queue = consumer.receiver_queue if isinstance(consumer, AsyncConsumer) else None
        self._queue = queue
        # A run of messages taken from the receiver queue in one go (``bulk_takes``), handed
        # out one per receive while the queue was not cleared since (``generation``).
        self._run: deque[Message] = deque()
        self._run_generation = -1
        # Acknowledgements waiting for the loop: one inbox call drains a window of them.
        # Only when handing out needs no bookkeeping on the loop: otherwise each must follow
        # its message's ``settle_taken`` in the inbox's FIFO order (the general path).
        self._acks: deque[Message | MessageId] | None = (
            deque() if queue is not None and queue.bulk_takes else None
        )
        self._acks_armed = False
        # Acknowledgements run later on the loop: what they would refuse is refused here.
        self._shared = shared
        self._listener = runner.listeners.start(
            f"magnetar-listener-{consumer.topic()}-{consumer.subscription_name()}",
            self._receive,
            message_listener,
            self,
        )

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        return self._consumer.consumer_name()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    @property
    def async_consumer(self) -> AsyncConsumer | AsyncMultiTopicConsumer:
        return self._consumer

    def has_reached_end_of_topic(self) -> bool:
        """The topic was terminated and everything was delivered (REACHED_END_OF_TOPIC)."""
        consumer = self._consumer
        if isinstance(consumer, AsyncConsumer):
            return consumer.has_reached_end_of_topic()
        # Several topics or partitions: when every one has (as the Java client).
        children = consumer.consumers()
        return bool(children) and all(c.has_reached_end_of_topic() for c in children)

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; wait at most ``timeout_millis`` (None: forever).

        Raises:
            ValueError: ``timeout_millis`` is not an int (the official check).
            Timeout, AlreadyClosed: as ``AsyncConsumer.receive``.
        """
        if timeout_millis is not None and timeout_millis.__class__ is not int:
            check_type(int, timeout_millis, "timeout_millis")
        self._refuse_with_listener()
        return self._receive(timeout_millis)

    def _refuse_with_listener(self) -> None:
        if self._listener is not None:
            raise InvalidConfiguration("this consumer has a message listener: it cannot receive")

    def pause_message_listener(self) -> None:
        """No more calls to the message listener until ``resume_message_listener``."""
        if self._listener is not None:
            self._listener.pause()

    def resume_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.resume()

    def _receive(self, timeout_millis: int | None = None) -> Message:
        consumer = self._consumer
        if not isinstance(consumer, AsyncConsumer):
            return self._runner.run(consumer.receive(timeout_millis))
        # Queued messages are taken here, without a round trip to the loop and back; their
        # bookkeeping (permits, ack timeout) follows through the inbox, ahead of any
        # acknowledgement this thread makes next. With nothing queued this thread waits on a
        # thread event the loop sets when messages arrive.
        runner = self._runner
        runner.check_usable()
        runner.loop_thread.refuse_to_block_the_loop()
        queue = self._queue
        assert queue is not None
        run = self._run
        if run:
            if queue.generation == self._run_generation:
                try:
                    return run.popleft()
                except IndexError:  # another thread receiving took the last one
                    pass
            else:
                run.clear()  # the queue was cleared since: so is the run (the broker resends it)
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            if queue.bulk_takes:
                taken_run = queue.take_run_for_thread()
                if taken_run is not None:
                    messages, self._run_generation, settle = taken_run
                    if settle:
                        # At once when a FLOW is due (a deferred one would hold it back while
                        # the broker could start its next read), else with the next window.
                        if queue.flow_owed():
                            runner.submit_urgent(consumer.settle_taken, None)
                        else:
                            runner.submit_deferred(consumer.settle_taken, None)
                    run.extend(messages[1:])
                    return messages[0]
            else:
                taken = queue.take_for_thread()
                if taken is not None:
                    message, settle = taken
                    if settle:
                        runner.submit_deferred(consumer.settle_taken, message)
                    return message
            if not consumer.is_receiving():
                # Closed or failed: the loop's receive raises the right error.
                return runner.run(consumer.receive(timeout_millis))
            if queue.flow_owed():  # returned before waiting, or the broker may stall
                runner.submit(consumer.settle_taken, None)
            if consumer.zero_queue:  # nothing is prefetched: ask for one entry
                consumer.check_zero_queue_timeout(timeout_millis)
                runner.submit(consumer.ask_one)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Timeout(f"no message within {timeout_millis} ms")
            queue.wait_for_thread(left)

    def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (entry id -1: empty); one topic only.

        It is answered after everything this consumer sent before, acknowledgements included:
        once it returns, those acknowledgements have reached the broker.
        """
        consumer = self._consumer
        if not isinstance(consumer, AsyncConsumer):
            raise OperationNotSupported(
                f"{consumer.topic()} spans several topics or partitions: ask each partition"
            )
        return self._runner.run(consumer.get_last_message_id())

    def batch_receive(
        self, max_num_messages: int | None = None, timeout_ms: int | None = None
    ) -> list[Message]:
        """As ``AsyncConsumer.batch_receive``: by the subscription's ``batch_receive_policy``."""
        self._refuse_with_listener()
        if self._run and self._queue is not None:  # taken ahead by receive: first in line
            self._queue.give_back_for_thread(list(self._run), self._run_generation)
            self._run.clear()
        return self._runner.run(self._consumer.batch_receive(max_num_messages, timeout_ms))

    def acknowledge(self, message: Message | MessageId) -> None:
        if message.__class__ is not Message:
            id_of(message)  # TypeError here, not later on the loop
        acks = self._acks
        if acks is None:
            self._runner.submit_deferred(self._consumer.acknowledge, message)
            return
        self._runner.check_usable()
        acks.append(message)
        if not self._acks_armed:
            # One drain per window: later acknowledgements join the queue it empties. The
            # drain is in the inbox ahead of anything this thread submits next, so every
            # acknowledgement made before a call reaches the loop before that call does (one
            # made after it may arrive earlier: acknowledgements commute with the rest).
            self._acks_armed = True
            self._runner.submit_deferred(self._drain_acks)

    def _drain_acks(self) -> None:
        """On the loop: acknowledge everything queued by ``acknowledge``."""
        self._acks_armed = False  # first: an acknowledgement from now on arms the next drain
        acks = self._acks
        consumer = self._consumer
        assert acks is not None
        assert isinstance(consumer, AsyncConsumer)
        try:
            consumer.acknowledge_queued(acks)
        except Exception:
            logger.exception("%s: acknowledgements failed", consumer)
            acks.clear()  # closed: nothing more can be acknowledged

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Raises:
        CumulativeAcknowledgementNotAllowedError: a Shared or Key_Shared subscription.
        """
        id_of(message)  # TypeError here, not later on the loop
        if self._shared:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/Key_Shared subscriptions"
            )
        self._runner.submit_deferred(self._consumer.acknowledge_cumulative, message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        id_of(message)  # TypeError here, not later on the loop
        self._runner.submit_deferred(self._consumer.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._runner.submit(self._consumer.redeliver_unacknowledged_messages)

    def seek(self, messageid: MessageId | int) -> None:
        """To a message id (excluded unless ``start_message_id_inclusive``) or a publish time
        (ms); see ``AsyncConsumer.seek``."""
        self._runner.run(self._consumer.seek(messageid))

    def unsubscribe(self) -> None:
        self._runner.run(self._consumer.unsubscribe())

    def close(self) -> None:
        try:
            self._runner.run(self._consumer.close())
        finally:
            self._runner.listeners.stop(self._listener)

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        try:
            return self.receive()
        except AlreadyClosed:
            raise StopIteration from None
