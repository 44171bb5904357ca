"""``Client`` and ``Producer``: the blocking facade, for scripts, threads and Spark executors.

A ``Client`` runs one event loop on a background thread (uvloop when installed) and an
``AsyncClient`` on it; every blocking call hands its work to that loop and waits. Work from
application threads goes through one FIFO inbox, drained by the loop in order, so calls made
by one thread happen in the order it made them (a ``send_async`` before a ``flush`` is
flushed) and many threads can share a client and its producers. The loop is woken once per
batch of submissions rather than once per call, which keeps ``send_async`` cheap.

``Producer.send_async(content, callback)`` calls ``callback(result, message_id)`` as the
official client does (``result`` is a ``Result``; ``message_id`` is None on failure), on the
client's loop thread: a callback must not block, and must not call blocking methods of this
client (that would deadlock; it raises ``RuntimeError`` instead). Without a callback it
returns a ``concurrent.futures.Future``. ``max_pending_messages`` is enforced in the calling
thread: with ``block_if_queue_full`` the call blocks there, otherwise the message is refused
with ``ProducerQueueIsFull``.

``os.fork()``: the loop thread and sockets stay with the parent. A ``Client`` used in a child
raises ``ClientUsedAfterFork``; the child creates its own ``Client`` (Spark's forked workers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, cast

from client.client import AsyncClient
from client.consumer import AsyncConsumer, PayloadSchema
from client.dead_letter import ConsumerDeadLetterPolicy
from client.errors import (
    AlreadyClosed,
    ClientUsedAfterFork,
    InvalidConfiguration,
    InvalidMessage,
    OperationNotSupported,
    ProducerQueueIsFull,
    PulsarException,
    Result,
    Timeout,
)
from client.listener import ListenerThread
from client.message import Message
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer, RegexSubscriptionMode
from client.partitioned_producer import AsyncPartitionedProducer
from client.process import current_pid
from client.producer import AsyncProducer, PayloadEncoder, prepare_message
from client.reader import AsyncMultiTopicReader, AsyncReader
from client.routing import MessageRouter, PartitionsRoutingMode
from client.table_view import AsyncTableView
from protocol.enums import (
    CompressionType,
    InitialPosition,
    ProducerAccessMode,
    SubType,
    TopicListMode,
)

__all__ = ["Client", "Consumer", "Producer", "Reader", "SendCallback"]

logger = logging.getLogger(__name__)
R = TypeVar("R")
SendCallback = Callable[[Result, MessageId | None], None]
MessageListener = Callable[["Consumer", Message], None]
ReaderListener = Callable[["Reader", Message], None]


# Deferred submissions reach the loop at most this late, or as soon as this many are queued.
_DEFER_SECONDS = 0.002
_DEFER_MAX_QUEUED = 512


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we run
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopThread:
    """An event loop on a daemon thread, fed through a FIFO inbox."""

    def __init__(self) -> None:
        self._inbox: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._wakeup_pending = False
        self._deferred_drain_armed = False
        self._started = threading.Event()
        self.loop: asyncio.AbstractEventLoop = _new_event_loop()
        self._thread = threading.Thread(target=self._run, name="magnetar-client", daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def call_soon(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop, after everything submitted before it."""
        self._inbox.append((function, args))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self.loop.call_soon_threadsafe(self._drain_inbox)

    def call_deferred(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop within ``_DEFER_SECONDS``, in order with every
        other submission. For work nobody waits on (acknowledgements): waking the loop costs
        a pipe write and a switch of threads, and a consumer acknowledging 100k messages a
        second pays it once per window instead of once per message."""
        inbox = self._inbox
        inbox.append((function, args))
        if len(inbox) >= _DEFER_MAX_QUEUED:
            if not self._wakeup_pending:
                self._wakeup_pending = True
                self.loop.call_soon_threadsafe(self._drain_inbox)
        elif not self._deferred_drain_armed:
            self._deferred_drain_armed = True
            self.loop.call_soon_threadsafe(self._arm_deferred_drain)

    def _arm_deferred_drain(self) -> None:
        self.loop.call_later(_DEFER_SECONDS, self._deferred_drain)

    def _deferred_drain(self) -> None:
        # Disarmed before draining: a submission racing with the drain is either drained
        # now or arms the next one. An immediate drain's flag is left alone (its drain is
        # still scheduled; it then finds the inbox empty).
        self._deferred_drain_armed = False
        self._run_inbox()

    def _drain_inbox(self) -> None:
        self._wakeup_pending = False  # first: a submission from now on schedules a new drain
        self._run_inbox()

    def _run_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            function, args = inbox.popleft()
            try:
                function(*args)
            except Exception:
                logger.exception("error in work submitted to the client loop")

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run ``coroutine`` on the loop and wait for its result in this thread.

        Raises:
            RuntimeError: called from the loop thread itself (it would wait for itself).
        """
        try:
            self.refuse_to_block_the_loop()
        except RuntimeError:
            coroutine.close()
            raise
        done: concurrent.futures.Future[R] = concurrent.futures.Future()
        self.call_soon(self._start, coroutine, done)
        return done.result()

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def refuse_to_block_the_loop(self) -> None:
        """Raise if called on the loop thread, where waiting for the loop would deadlock.

        Raises:
            RuntimeError: this is the loop thread (a send callback calling ``send``?).
        """
        if self.on_loop_thread():
            raise RuntimeError(
                "a blocking client call from the client's own loop thread (a send callback?) "
                "would deadlock; use send_async or the AsyncClient there"
            )

    def _start(self, coroutine: Coroutine[Any, Any, R], done: concurrent.futures.Future[R]) -> None:
        task = self.loop.create_task(coroutine)
        task.add_done_callback(functools.partial(_copy_outcome, done))

    def stop(self) -> None:
        """Stop the loop and wait for the thread to end."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _copy_outcome(done: concurrent.futures.Future[R], task: asyncio.Future[R]) -> None:
    if task.cancelled():
        done.cancel()
        return
    error = task.exception()
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(task.result())


class Client:
    """Blocking client (``pulsar.Client``'s API); safe to share between threads.

    Takes the same arguments as ``AsyncClient``.
    """

    def __init__(self, service_url: str, operation_timeout_seconds: float = 30, **options: Any):
        self._pid = current_pid()
        self._async = AsyncClient(service_url, operation_timeout_seconds, **options)
        self._loop_thread = _LoopThread()
        self._closed = False
        self._close_lock = threading.Lock()
        self._listeners: set[ListenerThread] = set()  # message/reader listener threads

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: PayloadEncoder | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30_000,
        compression_type: CompressionType | int = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50_000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode | int = (
            PartitionsRoutingMode.RoundRobinDistribution
        ),
        lazy_start_partitioned_producers: bool = False,
        properties: Mapping[str, str] | None = None,
        batching_type: object = None,
        encryption_key: str | None = None,
        crypto_key_reader: object = None,
        access_mode: ProducerAccessMode | int = ProducerAccessMode.Shared,
        message_router: MessageRouter | None = None,
    ) -> Producer:
        """Create a producer; see ``AsyncClient.create_producer``."""
        producer = self._run(
            self._async.create_producer(
                topic,
                producer_name,
                schema,
                initial_sequence_id,
                send_timeout_millis,
                compression_type,
                max_pending_messages,
                max_pending_messages_across_partitions,
                block_if_queue_full,
                batching_enabled,
                batching_max_messages,
                batching_max_allowed_size_in_bytes,
                batching_max_publish_delay_ms,
                chunking_enabled,
                message_routing_mode,
                lazy_start_partitioned_producers,
                properties,
                batching_type,
                encryption_key,
                crypto_key_reader,
                access_mode,
                message_router,
            )
        )
        slots = (
            max_pending_messages
            if isinstance(producer, AsyncProducer)
            else min(
                max_pending_messages * producer.partitions(), max_pending_messages_across_partitions
            )
        )
        return Producer(self, producer, schema, slots, block_if_queue_full)

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: SubType | int = SubType.Exclusive,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int = 0,
        negative_ack_redelivery_delay_ms: int = 60_000,
        properties: Mapping[str, str] | None = None,
        initial_position: InitialPosition | int = InitialPosition.Latest,
        batch_index_ack_enabled: bool = False,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        pattern_auto_discovery_period: float = 60,
        is_read_compacted: bool = False,
        regex_subscription_mode: RegexSubscriptionMode | int = RegexSubscriptionMode.PersistentOnly,
        message_listener: MessageListener | None = None,
    ) -> Consumer:
        """Subscribe; see ``AsyncClient.subscribe``.

        ``message_listener``: ``listener(consumer, message)`` is called for each message on a
        thread of this consumer's own (``client.listener``); ``receive`` is then refused.
        """
        # mypy cannot pick an overload for a union argument: the union of both results.
        consumer = cast(
            "AsyncConsumer | AsyncMultiTopicConsumer",
            self._run(
                self._async.subscribe(
                    topic,
                    subscription_name,
                    consumer_type,
                    schema,
                    receiver_queue_size,
                    consumer_name,
                    unacked_messages_timeout_ms,
                    negative_ack_redelivery_delay_ms,
                    properties,
                    initial_position,
                    batch_index_ack_enabled,
                    dead_letter_policy,
                    pattern_auto_discovery_period,
                    is_read_compacted=is_read_compacted,
                    regex_subscription_mode=regex_subscription_mode,
                )
            ),
        )
        return Consumer(self, consumer, message_listener)

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        reader_name: str | None = None,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        start_message_id_inclusive: bool = False,
        is_read_compacted: bool = False,
        reader_listener: ReaderListener | None = None,
    ) -> Reader:
        """Create a reader; see ``AsyncClient.create_reader``. ``reader_listener``: as the
        consumer's ``message_listener``, called as ``listener(reader, message)``."""
        reader = self._run(
            self._async.create_reader(
                topic,
                start_message_id,
                reader_name,
                schema,
                receiver_queue_size,
                start_message_id_inclusive,
                is_read_compacted=is_read_compacted,
            )
        )
        return Reader(self, reader, reader_listener)

    def create_table_view(
        self,
        topic: str,
        subscription_name: str | None = None,
        schema: PayloadSchema | None = None,
    ) -> TableView:
        """A ``TableView`` of ``topic`` (see ``client.table_view``), ready when returned."""
        view = self._run(self._async.create_table_view(topic, subscription_name, schema))
        return TableView(self, view)

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._async.get_topic_partitions(topic))

    def get_topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]:
        """The topics of ``tenant/namespace`` (partitions by their ``-partition-N`` names)."""
        return self._run(self._async.get_topics_of_namespace(namespace, mode))

    def close(self) -> None:
        """Close producers and connections, then stop the loop thread; idempotent.

        In a process forked from the one that created the client, this only marks it closed.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if self._pid != current_pid():
                return
            try:
                self._loop_thread.run(self._async.close())
            finally:
                self._loop_thread.stop()
            for listener in list(self._listeners):  # each ends: its consumer is closed
                self._stop_listener(listener)

    def _stop_listener(self, listener: ListenerThread | None) -> None:
        """After its consumer (or this client) is closed: receiving raises AlreadyClosed there,
        so the thread ends once its listener returns."""
        if listener is not None:
            listener.stop()
            listener.join(self._async.config.operation_timeout)
            self._listeners.discard(listener)

    def _start_listener(
        self,
        name: str,
        receive: Callable[[], Message],
        listener: Callable[[Any, Message], None] | None,
        owner: Consumer | Reader,
    ) -> ListenerThread | None:
        """A thread calling ``listener(owner, message)`` (None without a listener)."""
        if listener is None:
            return None
        thread = ListenerThread(name, receive, functools.partial(listener, owner))
        self._listeners.add(thread)
        return thread.start()

    @property
    def async_client(self) -> AsyncClient:
        """The ``AsyncClient`` underneath (use it only from the loop thread)."""
        return self._async

    @property
    def loop_thread(self) -> threading.Thread:
        return self._loop_thread.thread

    def _check_usable(self) -> None:
        if self._pid != current_pid():
            raise ClientUsedAfterFork(
                f"this Client was created in process {self._pid}, before os.fork(); "
                "create a new Client in the child process"
            )
        if self._closed:
            raise AlreadyClosed("the client is closed")

    def _run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        try:
            self._check_usable()
        except PulsarException:
            coroutine.close()
            raise
        return self._loop_thread.run(coroutine)

    def _submit(self, function: Callable[..., None], *args: Any) -> None:
        self._check_usable()
        self._loop_thread.call_soon(function, *args)

    def _submit_deferred(self, function: Callable[..., None], *args: Any) -> None:
        """``_submit`` for work nobody waits on: it may reach the loop a moment later."""
        self._check_usable()
        self._loop_thread.call_deferred(function, *args)


class Producer:
    """Blocking producer (``pulsar.Producer``'s API) over an ``AsyncProducer``."""

    def __init__(
        self,
        client: Client,
        producer: AsyncProducer | AsyncPartitionedProducer,
        schema: PayloadEncoder | None,
        max_pending_messages: int,
        block_if_queue_full: bool,
    ) -> None:
        self._client = client
        self._producer = producer
        self._schema = schema
        self._block = block_if_queue_full
        self._slots = _Slots(max_pending_messages) if max_pending_messages > 0 else None

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        return self._producer.is_connected()

    @property
    def async_producer(self) -> AsyncProducer | AsyncPartitionedProducer:
        return self._producer

    def send(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: Sequence[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> MessageId:
        """Publish and wait until the broker stored the message; see ``AsyncProducer.send``."""
        self._client._loop_thread.refuse_to_block_the_loop()
        done: concurrent.futures.Future[MessageId] = concurrent.futures.Future()
        self._send(
            content,
            done,
            None,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            event_timestamp,
            deliver_at,
            deliver_after,
            idempotency_key,
        )
        return done.result()

    def send_async(
        self,
        content: Any,
        callback: SendCallback | None = None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: Sequence[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> concurrent.futures.Future[MessageId] | None:
        """Queue a message; ``callback(result, message_id)`` or the returned future tells.

        Raises:
            ValueError: bad argument types (at once, in this thread).
            ClientUsedAfterFork, AlreadyClosed: the client cannot be used.
        """
        done: concurrent.futures.Future[MessageId] | None = (
            concurrent.futures.Future() if callback is None else None
        )
        self._send(
            content,
            done,
            callback,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            event_timestamp,
            deliver_at,
            deliver_after,
            idempotency_key,
        )
        return done

    def flush(self) -> None:
        self._client._run(self._producer.flush())

    def close(self) -> None:
        self._client._run(self._producer.close())

    def _send(
        self,
        content: Any,
        done: concurrent.futures.Future[MessageId] | None,
        callback: SendCallback | None,
        properties: Mapping[str, str] | None,
        partition_key: str | None,
        ordering_key: str | None,
        sequence_id: int | None,
        event_timestamp: int | None,
        deliver_at: int | None,
        deliver_after: timedelta | None,
        idempotency_key: str | None = None,
    ) -> None:
        self._client._check_usable()
        message = prepare_message(
            content,
            self._schema,
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            event_timestamp=event_timestamp,
            deliver_at=deliver_at,
            deliver_after=deliver_after,
            idempotency_key=idempotency_key,
        )
        if sequence_id is not None and sequence_id < 0:
            raise ValueError(f"sequence_id must be >= 0, not {sequence_id}")
        # Blocking for room on the loop thread (a callback sending) would stop the very loop
        # that frees it: there a full queue refuses instead.
        block = self._block and not self._client._loop_thread.on_loop_thread()
        if self._slots is not None and not self._slots.acquire(blocking=block):
            _deliver(done, callback, error=ProducerQueueIsFull("the producer's queue is full"))
            return
        try:
            self._client._submit(
                self._enqueue, message, sequence_id, _Delivery(self, done, callback)
            )
        except BaseException:
            self._release()
            raise

    def _enqueue(self, message: Any, sequence_id: int | None, delivery: _Delivery) -> None:
        # On the loop thread.
        try:
            self._producer.enqueue_to(delivery, message, sequence_id)
        except Exception as exc:
            error = exc if isinstance(exc, PulsarException) else InvalidMessage(repr(exc))
            delivery.set_exception(error)

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()


class Consumer:
    """Blocking consumer (``pulsar.Consumer``'s API) over an ``AsyncConsumer``.

    Acknowledgements are handed to the loop without waiting (as the official ones are
    asynchronous), within 2 ms and many at a time; they are sent in the order they were made,
    and before anything this consumer does next that waits for the loop (``close``,
    ``get_last_message_id``...).
    """

    def __init__(
        self,
        client: Client,
        consumer: AsyncConsumer | AsyncMultiTopicConsumer,
        message_listener: MessageListener | None = None,
    ) -> None:
        self._client = client
        self._consumer = consumer
        self._listener = client._start_listener(
            f"magnetar-listener-{consumer.topic()}-{consumer.subscription_name()}",
            self._receive,
            message_listener,
            self,
        )

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

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
            return self._client._run(consumer.receive(timeout_millis))
        # Queued messages are taken here, without a round trip to the loop and back; their
        # bookkeeping (permits, ack timeout) follows through the inbox, ahead of any
        # acknowledgement this thread makes next. With nothing queued this thread waits on a
        # thread event the loop sets when messages arrive.
        client = self._client
        client._check_usable()
        client._loop_thread.refuse_to_block_the_loop()
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            taken = consumer.take_queued()
            if taken is not None:
                message, settle = taken
                if settle:
                    client._submit_deferred(consumer.settle_taken, message)
                return message
            if not consumer.is_receiving():
                # Closed or failed: the loop's receive raises the right error.
                return client._run(consumer.receive(timeout_millis))
            if consumer.owes_permits():  # returned before waiting, or the broker may stall
                client._submit(consumer.settle_taken, None)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Timeout(f"no message within {timeout_millis} ms")
            consumer.wait_queued(left)

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
        return self._client._run(consumer.get_last_message_id())

    def batch_receive(self, max_num_messages: int = 100, timeout_ms: int = 100) -> list[Message]:
        self._refuse_with_listener()
        return self._client._run(self._consumer.batch_receive(max_num_messages, timeout_ms))

    def acknowledge(self, message: Message | MessageId) -> None:
        self._client._submit_deferred(self._consumer.acknowledge, message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._client._submit_deferred(self._consumer.acknowledge_cumulative, message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._client._submit_deferred(self._consumer.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._client._submit(self._consumer.redeliver_unacknowledged_messages)

    def seek(self, target: MessageId | int) -> None:
        self._client._run(self._consumer.seek(target))

    def unsubscribe(self) -> None:
        self._client._run(self._consumer.unsubscribe())

    def close(self) -> None:
        try:
            self._client._run(self._consumer.close())
        finally:
            self._client._stop_listener(self._listener)

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        try:
            return self.receive()
        except AlreadyClosed:
            raise StopIteration from None


class Reader:
    """Blocking reader (``pulsar.Reader``'s API) over an ``AsyncReader`` (or, on a partitioned
    topic, an ``AsyncMultiTopicReader``)."""

    def __init__(
        self,
        client: Client,
        reader: AsyncReader | AsyncMultiTopicReader,
        reader_listener: ReaderListener | None = None,
    ) -> None:
        self._client = client
        self._reader = reader
        # One topic: read through the consumer facade's fast path (queued messages are taken
        # without a round trip through the loop: about 6 us a message instead of 90 us).
        self._receiver = (
            Consumer(client, reader.consumer) if isinstance(reader, AsyncReader) else None
        )
        self._listener = client._start_listener(
            f"magnetar-reader-listener-{reader.topic()}", self._read_next, reader_listener, self
        )

    def topic(self) -> str:
        return self._reader.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        if self._listener is not None:
            raise InvalidConfiguration("this reader has a reader listener: it cannot read_next")
        return self._read_next(timeout_millis)

    def _read_next(self, timeout_millis: int | None = None) -> Message:
        if self._receiver is not None:
            return self._receiver._receive(timeout_millis)
        return self._client._run(self._reader.read_next(timeout_millis))

    def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (entry id -1: empty); one topic only."""
        reader = self._reader
        if not isinstance(reader, AsyncReader):
            raise OperationNotSupported(
                f"{reader.topic()} is partitioned: ask a reader of each partition"
            )
        return self._client._run(reader.get_last_message_id())

    def has_message_available(self) -> bool:
        return self._client._run(self._reader.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        self._client._run(self._reader.seek(target))

    def close(self) -> None:
        try:
            self._client._run(self._reader.close())
        finally:
            self._client._stop_listener(self._listener)

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Message:
        try:
            return self.read_next()
        except AlreadyClosed:
            raise StopIteration from None


class _Slots:
    """The pending-message bound, counted in the application's threads.

    A lock and a counter (a ``threading.Semaphore`` costs several times more per message);
    the condition is used only when a sender actually has to wait.
    """

    __slots__ = ("_available", "_condition", "_waiting")

    def __init__(self, limit: int) -> None:
        self._available = limit
        self._waiting = 0
        self._condition = threading.Condition(threading.Lock())

    def acquire(self, blocking: bool) -> bool:
        with self._condition:
            while self._available <= 0:
                if not blocking:
                    return False
                self._waiting += 1
                try:
                    self._condition.wait()
                finally:
                    self._waiting -= 1
            self._available -= 1
            return True

    def release(self) -> None:
        with self._condition:
            self._available += 1
            if self._waiting:
                self._condition.notify()


class _Delivery:
    """A send's completion for the blocking facade (``pending.Completion``).

    Called on the loop thread when the receipt is handled; it frees the slot and hands the
    outcome to the callback or the ``concurrent.futures.Future`` at once, without a
    round through the event loop's scheduler.
    """

    __slots__ = ("_callback", "_done", "_finished", "_producer")

    def __init__(
        self,
        producer: Producer,
        done: concurrent.futures.Future[MessageId] | None,
        callback: SendCallback | None,
    ) -> None:
        self._producer = producer
        self._done = done
        self._callback = callback
        self._finished = False

    def done(self) -> bool:
        return self._finished

    def set_result(self, result: MessageId, /) -> None:
        self._finish()
        _deliver(self._done, self._callback, message_id=result)

    def set_exception(self, exception: BaseException, /) -> None:
        self._finish()
        error = (
            exception
            if isinstance(exception, PulsarException)
            else PulsarException(repr(exception))
        )
        _deliver(self._done, self._callback, error=error)

    def _finish(self) -> None:
        self._finished = True
        self._producer._release()


def _deliver(
    done: concurrent.futures.Future[MessageId] | None,
    callback: SendCallback | None,
    *,
    message_id: MessageId | None = None,
    error: PulsarException | None = None,
) -> None:
    if done is not None:
        if error is not None:
            done.set_exception(error)
        else:
            assert message_id is not None
            done.set_result(message_id)
        return
    assert callback is not None
    try:
        callback(Result.Ok if error is None else error.result, message_id)
    except Exception:
        logger.exception("exception in a send_async callback (ignored)")


class TableView:
    """Blocking facade of ``AsyncTableView`` (the official ``TableView`` names). Reads are
    snapshots of the map the event loop keeps current; listeners run on the loop thread."""

    def __init__(self, client: Client, view: AsyncTableView) -> None:
        self._client = client
        self._view = view

    def get(self, key: str, default: Any = None) -> Any:
        return self._client._run(_call(lambda: self._view.get(key, default)))

    def items(self) -> list[tuple[str, Any]]:
        return self._client._run(_call(lambda: list(self._view.items())))

    def snapshot(self) -> dict[str, Any]:
        return self._client._run(_call(self._view.snapshot))

    def __len__(self) -> int:
        return self._client._run(_call(lambda: len(self._view)))

    def __contains__(self, key: object) -> bool:
        return self._client._run(_call(lambda: key in self._view))

    def for_each(self, action: Callable[[str, Any], None]) -> None:
        self._client._run(_call(lambda: self._view.for_each(action)))

    def for_each_and_listen(self, action: Callable[[str, Any], None]) -> None:
        self._client._run(_call(lambda: self._view.for_each_and_listen(action)))

    def listen(self, action: Callable[[str, Any], None]) -> None:
        self._client._run(_call(lambda: self._view.listen(action)))

    def close(self) -> None:
        self._client._run(self._view.close())


async def _call(function: Callable[[], R]) -> R:
    """Run ``function`` on the loop thread (where the table view's map changes)."""
    return function()
