"""``AsyncConsumer``: a consumer of one topic (and, with ``durable=False``, a reader's core).

What it does, as the official C++ client does unless said otherwise:

* **Subscription.** SUBSCRIBE on the connection to the topic's owner, then FLOW with
  ``receiver_queue_size`` permits. On any connection loss (or CLOSE_CONSUMER from the broker,
  which a seek causes) it looks the topic up again and resubscribes with backoff; messages
  that were queued but not yet received by the application are dropped (the broker sends them
  again) and the permits start afresh.
* **Messages** arrive through ``client.consumer.entries`` into the receiver queue
  (``client.consumer.receiver_queue``); acknowledgements, negative ones and redelivery:
  ``client.consumer.acknowledgements``. Redelivery of everything (Exclusive/Failover) also
  clears the receiver queue.
* **Seek** by id or publish time: the grouped acknowledgements leave first (else they would
  land after the rewind and acknowledge what it brings back), then the broker disconnects
  the consumer, resets the cursor and answers; ``seek`` returns once the consumer has
  resubscribed. A seek by id excludes that message unless ``start_message_id_inclusive``.
* **Zero queue** (``receiver_queue_size`` 0): one FLOW per ``receive``, never a timeout.
* **Readers** (``durable=False``): the subscription starts at ``start_message_id``; messages
  before it are filtered out; after a reconnection the reader resumes after the last message
  it handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
from collections import deque
from typing import TYPE_CHECKING, Protocol

from client.acks import BatchAcks
from client.config import ClientConfig
from client.consumer.ack_grouping import AckGrouper
from client.consumer.acknowledgements import Acknowledger, id_of, tracks_handouts
from client.consumer.batch_receive import gather_batch
from client.consumer.config import ConsumerConfig
from client.consumer.entries import EntryDecoder
from client.consumer.receiver_queue import ReceiverQueue
from client.dead_letter import DeadLetterSender
from client.errors import (
    AlreadyClosed,
    Disconnected,
    InvalidConfiguration,
    NotConnected,
    PulsarException,
    Timeout,
)
from client.message import Message
from client.message_id import MessageId
from protocol import Frame, commands
from protocol.ids import MessageId as WireMessageId

if TYPE_CHECKING:
    from client.connection import Connection

__all__ = ["AsyncConsumer", "ConsumerHost"]

logger = logging.getLogger(__name__)


class ConsumerHost(Protocol):
    """What a consumer needs from its client."""

    @property
    def config(self) -> ClientConfig: ...

    async def connection_for(self, topic: str) -> Connection: ...

    def consumer_closed(self, consumer: AsyncConsumer) -> None: ...


class _State(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class AsyncConsumer:
    """A consumer of one topic; create it with ``AsyncClient.subscribe`` (or a reader)."""

    def __init__(
        self,
        host: ConsumerHost,
        topic: str,
        consumer_id: int,
        config: ConsumerConfig,
        dead_letter: DeadLetterSender | None = None,
    ) -> None:
        self._host = host
        self._topic = topic
        self._consumer_id = consumer_id
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._state = _State.CONNECTING
        self._cnx: Connection | None = None
        self._creating_on: Connection | None = None
        self._created: asyncio.Future[None] = self._loop.create_future()
        self._connect_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # subscribed on a live connection
        self._reached_end_of_topic = False
        self._dead_letter = dead_letter  # owned: closed with the consumer
        # Whether handing a message out needs more than a permit (skipped on the hot path).
        self._tracks_handouts = tracks_handouts(config, dead_letter)
        self._receiver = ReceiverQueue(
            config.receiver_queue_size,
            self._send_flow,
            self.is_receiving,
            settle_every_take=self._tracks_handouts,
            bulk_takes=config.durable,
        )
        # One grouper: everything about acknowledgement leaves in the order it was made.
        self._acks = AckGrouper(self._loop, consumer_id, self._connection)
        batches = BatchAcks()  # filled as batches arrive, emptied as they are acknowledged
        self._entries = EntryDecoder(
            self, topic, consumer_id, config, self._receiver, self._acks, batches, self._connection
        )
        self._acknowledger = Acknowledger(
            self, consumer_id, config, self._acks, batches, self._entries, dead_letter
        )
        if dead_letter is not None:
            self._entries.exhausted_after = dead_letter.policy.max_redeliver_count
            self._entries.on_exhausted = self._acknowledger.dead_letter_now
        # The official clients name an unnamed consumer themselves (10 hex digits).
        self._name = config.consumer_name or os.urandom(5).hex()
        zero = self._receiver.zero  # on_message, per instance: the connection calls the decoder
        self.on_message = self._on_message_zero_queue if zero else self._entries.on_message  # type: ignore[method-assign]

    # --- what the application sees ------------------------------------------------------

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._config.subscription_name

    def consumer_name(self) -> str:
        """This consumer's name (``consumer_name``, else one made up, as the official)."""
        return self._name

    def is_connected(self) -> bool:
        return self._state is _State.READY

    def is_receiving(self) -> bool:
        """Open: subscribed, or subscribing again after a connection loss."""
        return self._state is _State.READY or self._state is _State.CONNECTING

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; wait at most ``timeout_millis`` (None: forever).

        Raises:
            Timeout: nothing arrived in time.
            AlreadyClosed: the consumer is (or gets) closed.
        """
        queue = self._receiver.messages
        if queue:  # fast path: no timeout scope, no wait
            return self._hand_out(queue.popleft())
        receiver = self._receiver
        if receiver.owes_permits():  # a blocking receiver's, not yet returned: before waiting
            receiver.settle_owed()
        zero = receiver.zero
        if zero:
            self.check_zero_queue_timeout(timeout_millis)
        arrived = receiver.arrived
        try:
            async with asyncio.timeout(None if timeout_millis is None else timeout_millis / 1000):
                while not queue:
                    self._check_open()
                    arrived.clear()
                    if zero:
                        receiver.ask_one()
                    await arrived.wait()
        except TimeoutError:
            raise Timeout(f"no message within {timeout_millis} ms") from None
        return self._hand_out(queue.popleft())

    def receive_nowait(self) -> Message | None:
        """The next queued message, or None (no waiting)."""
        self._check_open()
        queue = self._receiver.messages
        return self._hand_out(queue.popleft()) if queue else None

    async def batch_receive(
        self, max_num_messages: int | None = None, timeout_ms: int | None = None
    ) -> list[Message]:
        """Messages gathered until the subscription's ``batch_receive_policy`` (the official
        default: 10 MiB of payload or 100 ms) is met: as many messages, as many bytes, or the
        timeout; an empty list when nothing came in time. ``max_num_messages`` and
        ``timeout_ms`` override the policy's (a limit below 1: none)."""
        policy = self._config.batch_receive_policy
        return await gather_batch(
            self.receive,
            self._check_open,
            policy.getMaxNumMessages() if max_num_messages is None else max_num_messages,
            policy.getMaxNumBytes(),
            policy.getTimeoutMs() if timeout_ms is None else timeout_ms,
        )

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent grouped, see ``client.consumer.ack_grouping``)."""
        self._check_open()
        if message.__class__ is Message:
            self._acknowledger.acknowledge_message(message)
        else:
            self._acknowledger.acknowledge(id_of(message))

    def acknowledge_queued(self, pending: deque[Message | MessageId]) -> None:
        """``acknowledge`` each message or id of ``pending``, emptying it from the left (the
        blocking facade's window of acknowledgements, in one call)."""
        self._check_open()
        self._acknowledger.acknowledge_queued(pending)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one (not on Shared/Key_Shared).

        Raises:
            CumulativeAcknowledgementNotAllowedError: a Shared or Key_Shared subscription.
        """
        self._check_open()
        self._acknowledger.acknowledge_cumulative(id_of(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message delivered again after ``negative_ack_redelivery_delay_ms``."""
        self._check_open()
        self._acknowledger.negative_acknowledge(id_of(message))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to deliver again every message not acknowledged yet."""
        self._check_open()
        self._redeliver_all()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id (inclusive) or a publish time (ms).

        Returns once the consumer has resubscribed at the new position.
        """
        target = messageid  # the official parameter name
        self._check_open()
        cnx = self._cnx
        if cnx is None:
            raise NotConnected(f"consumer on {self._topic} is not connected")
        if not isinstance(target, (MessageId, int)):
            raise ValueError(f"invalid seek_arg type {type(target)}")
        # Acks made before the seek go first: after it, they would ack what it redelivers.
        self._acks.flush()
        if isinstance(target, MessageId):
            wire = target.wire
            # Filter from the new start (the target itself too unless inclusive), as the C++
            # consumer does after a seek, durable or not.
            self._entries.start.move_to(target, self._config.start_message_id_inclusive)

            def build(rid: int) -> bytes:
                return commands.seek(self._consumer_id, rid, message_id=wire)
        else:
            self._entries.start.turn_off()  # a time seek turns the start filter off
            publish_time = int(target)

            def build(rid: int) -> bytes:
                return commands.seek(self._consumer_id, rid, publish_time=publish_time)

        self._receiver.forget_last_taken()
        self._ready.clear()
        dropped = self._clear_queue()
        try:
            await cnx.request(build)
        finally:
            if self._cnx is cnx and cnx.is_ready and self._state is _State.READY:
                # The broker did not disconnect us: give back the permits of what was dropped.
                self._ready.set()
                self._receiver.return_permits(dropped)
        await self._wait_ready()

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (entry id -1 when it is empty), as the official
        ``Consumer.get_last_message_id``.

        The broker answers requests of one connection in order, so when this returns every
        acknowledgement this consumer made before the call has reached the broker.
        """
        last, _ = await self.last_message_id_and_mark_delete()
        return MessageId.from_wire(last)

    async def last_message_id_and_mark_delete(
        self,
    ) -> tuple[WireMessageId, WireMessageId | None]:
        """The topic's last message id and this subscription's mark-delete position."""
        cnx = await self._subscribed_connection()
        answer = await cnx.request(lambda rid: commands.get_last_message_id(self._consumer_id, rid))
        response = answer.getLastMessageIdResponse
        mark_delete = (
            WireMessageId.from_pb(response.consumer_mark_delete_position)
            if response.HasField("consumer_mark_delete_position")
            else None
        )
        return WireMessageId.from_pb(response.last_message_id), mark_delete

    @property
    def queued(self) -> int:
        """Messages received from the broker and not yet handed to the application."""
        return len(self._receiver.messages)

    @property
    def last_dequeued(self) -> MessageId | None:
        return self._receiver.last_taken

    @property
    def start_message_id(self) -> MessageId | None:
        return self._entries.start.start

    @property
    def start_inclusive(self) -> bool:
        return self._entries.start.inclusive

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close."""
        cnx = await self._subscribed_connection()
        await cnx.request(lambda rid: commands.unsubscribe(self._consumer_id, rid))
        cnx.remove_consumer(self._consumer_id, self)
        self._cnx = None
        await self.close()

    async def close(self) -> None:
        """Send pending acknowledgements, detach from the broker; idempotent."""
        if self._close_task is None:
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    # --- the blocking facade's receiver, on its own thread --------------------------------

    @property
    def receiver_queue(self) -> ReceiverQueue:
        """The receiver queue, for a blocking receiver on another thread: its ``*_for_thread``
        methods are thread-safe; what they hand out is settled on the loop (``settle_taken``)."""
        return self._receiver

    def settle_taken(self, message: Message | None) -> None:
        """On the loop: the bookkeeping of handing out for messages a blocking receiver took
        from ``receiver_queue`` (``message``: the one to track, when tracking is on)."""
        if message is not None and self._tracks_handouts:
            self._acknowledger.handed_out(message, message.message_id())
        self._receiver.settle_owed()

    # --- internals: handing out and acknowledging ---------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state is _State.READY or state is _State.CONNECTING:
            return
        if state is _State.CLOSING or state is _State.CLOSED:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        if self._state is _State.FAILED:
            raise NotConnected(f"consumer on {self._topic} was never created")

    async def _wait_ready(self) -> None:
        async with asyncio.timeout(self._host.config.operation_timeout):
            await self._ready.wait()

    async def _subscribed_connection(self) -> Connection:
        """The connection, once subscribed, with the grouped acknowledgements sent: the broker
        answers a connection's commands in order, so an answer also tells they arrived."""
        self._check_open()
        await self._wait_ready()
        cnx = self._cnx
        if cnx is None:
            raise NotConnected(f"consumer on {self._topic} is not connected")
        self._acks.flush()
        return cnx

    def _connection(self) -> Connection | None:
        return self._cnx

    def check_zero_queue_timeout(self, timeout_millis: int | None) -> None:
        """Raises InvalidConfiguration for a zero queue given a timeout (as the C++ client: the
        entry asked for could arrive after it)."""
        if timeout_millis is not None and self._receiver.zero:
            raise InvalidConfiguration("a consumer with receiver_queue_size 0 cannot time out")

    @property
    def zero_queue(self) -> bool:
        return self._receiver.zero

    def ask_one(self) -> None:
        """On the loop: a zero queue's receiver waits: ask for one entry (FLOW 1)."""
        self._receiver.ask_one()

    def _on_message_zero_queue(self, frame: Frame) -> None:
        receiver = self._receiver
        receiver.entry_arrived()
        self._entries.on_message(frame)
        if not receiver.messages:  # filtered or discarded: receivers ask again
            receiver.wake()

    def _send_flow(self, permits: int) -> bool:
        cnx = self._cnx
        if cnx is None or self._state is not _State.READY:
            return False
        cnx.write(commands.flow(self._consumer_id, permits))
        return True

    def _hand_out(self, message: Message) -> Message:
        if self._tracks_handouts:
            self._acknowledger.handed_out(message, message.message_id())
        self._receiver.handed_out(message)
        return message

    def _clear_queue(self) -> int:
        dropped = self._receiver.clear()
        self._entries.clear()
        return dropped

    def _redeliver_all(self) -> None:
        """Exclusive/Failover redelivery: the broker rewinds; what is queued comes again."""
        self._acknowledger.redelivery.clear()
        dropped = self._clear_queue()
        cnx = self._cnx
        if cnx is not None:
            self._acks.flush()
            cnx.write(commands.redeliver_unacknowledged_messages(self._consumer_id))
        self._receiver.return_permits(dropped)

    # --- internals: connection events ---------------------------------------------------

    def on_message(self, frame: Frame) -> None:  # replaced per instance (``__init__``)
        self._entries.on_message(frame)

    def on_active_consumer_change(self, is_active: bool) -> None:
        logger.info("%s: active=%s", self, is_active)

    def on_reached_end_of_topic(self) -> None:
        logger.info("%s: reached the end of the topic", self)
        self._reached_end_of_topic = True

    def has_reached_end_of_topic(self) -> bool:
        """The topic was terminated and every message was delivered (REACHED_END_OF_TOPIC), as
        the Java client's ``hasReachedEndOfTopic``."""
        return self._reached_end_of_topic

    def on_closed_by_broker(self, connection: Connection) -> None:
        logger.info("%s: closed by the broker; resubscribing", self)
        self._connection_gone(connection)

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def _connection_gone(self, connection: Connection) -> None:
        if connection is self._creating_on:
            self._creating_on = None
        if connection is not self._cnx:
            return
        self._cnx = None
        self._ready.clear()
        self._clear_queue()
        if self._state is _State.READY:
            self._state = _State.CONNECTING
        if self._state is _State.CONNECTING and (
            self._connect_task is None or self._connect_task.done()
        ):
            self._connect_task = self._loop.create_task(self._connect_loop())

    # --- internals: (re)subscription ----------------------------------------------------

    async def start(self) -> None:
        """Subscribe (``AsyncClient.subscribe`` calls this).

        Raises:
            Timeout: retriable failures until the operation timeout.
            PulsarException: a failure retrying cannot mend (ConsumerBusy, ...).
        """
        self._connect_task = self._loop.create_task(self._connect_loop())
        try:
            await asyncio.shield(self._created)
        except asyncio.CancelledError:
            await self.close()
            raise
        except PulsarException:
            self._host.consumer_closed(self)
            raise

    async def _connect_loop(self) -> None:
        backoff = self._host.config.new_backoff()
        first = not self._created.done()
        deadline = self._loop.time() + self._host.config.operation_timeout
        while True:
            try:
                await self._subscribe_on(await self._host.connection_for(self._topic))
                return
            except PulsarException as exc:
                if first and (not exc.retriable or self._loop.time() >= deadline):
                    self._state = _State.FAILED
                    if not self._created.done():
                        self._created.set_exception(exc)
                    return
                logger.warning("%s: cannot (re)subscribe, retrying: %r", self, exc)
            await asyncio.sleep(backoff.next())

    def _subscribe_command(self, request_id: int) -> bytes:
        config = self._config
        schema = config.schema.to_pb() if config.schema is not None else None
        start: WireMessageId | None = None
        if not config.durable:
            start = self._entries.start.resume_after(self._receiver.last_taken).wire
        return commands.subscribe(
            self._topic,
            config.subscription_name,
            self._consumer_id,
            request_id,
            config.consumer_type,
            consumer_name=self._name,
            durable=config.durable,
            start_message_id=start,
            metadata=config.properties,
            schema=schema,
            initial_position=config.initial_position,
            read_compacted=config.read_compacted or None,
            key_shared_meta=config.key_shared_meta(),
        )

    async def _subscribe_on(self, cnx: Connection) -> None:
        left = self._acknowledger.moved_to(cnx.cluster)
        if left is not None:  # a reader resumes where it was on that cluster, or at its start
            self._receiver.moved(left, cnx.cluster)
        cnx.register_consumer(self._consumer_id, self)
        self._creating_on = cnx
        try:
            await cnx.request(self._subscribe_command)
        except BaseException as exc:
            cnx.remove_consumer(self._consumer_id, self)
            if not isinstance(exc, PulsarException) or isinstance(exc, Timeout):
                cnx.send_request_nowait(lambda rid: commands.close_consumer(self._consumer_id, rid))
            raise
        if self._creating_on is not cnx or not cnx.is_ready:
            cnx.remove_consumer(self._consumer_id, self)
            raise Disconnected("the connection closed while subscribing")
        self._creating_on = None
        self._cnx = cnx
        self._clear_queue()
        self._receiver.reset_permits()
        if self._state is _State.CONNECTING:
            self._state = _State.READY
        if self._config.receiver_queue_size:
            cnx.write(commands.flow(self._consumer_id, self._config.receiver_queue_size))
        else:
            self._receiver.wake()  # a zero queue's waiting receivers ask again
        self._acks.flush()
        self._ready.set()
        logger.info("%s: subscribed on %s", self, cnx.physical)
        if not self._created.done():
            self._created.set_result(None)

    # --- closing ------------------------------------------------------------------------

    async def _close(self) -> None:
        was = self._state
        self._state = _State.CLOSING
        self._receiver.wake()  # wake receivers: they see AlreadyClosed
        self._acknowledger.redelivery.cancel()
        task, self._connect_task = self._connect_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not self._created.done():
            self._created.set_exception(AlreadyClosed("consumer closed while subscribing"))
            self._created.exception()
        cnx, self._cnx = self._cnx, None
        if cnx is not None and was is _State.READY:
            acks = self._acks.take()
            if acks and cnx.is_ready:
                cnx.write(commands.ack(self._consumer_id, acks))
            cnx.remove_consumer(self._consumer_id, self)
            if cnx.is_ready:
                try:
                    await cnx.request(lambda rid: commands.close_consumer(self._consumer_id, rid))
                except PulsarException as exc:
                    logger.info("%s: close not confirmed by the broker: %r", self, exc)
        self._receiver.clear()  # and stale runs a blocking receiver took
        if self._dead_letter is not None:
            await self._dead_letter.close()
        self._state = _State.CLOSED
        self._host.consumer_closed(self)

    def __repr__(self) -> str:
        return (
            f"<AsyncConsumer {self._config.subscription_name} on {self._topic} "
            f"({self._state.value})>"
        )
