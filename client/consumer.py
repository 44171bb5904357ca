"""``AsyncConsumer``: a consumer of one topic (and, with ``durable=False``, a reader's core).

What it does, as the official C++ client does unless said otherwise:

* **Subscription.** SUBSCRIBE on the connection to the topic's owner, then FLOW with
  ``receiver_queue_size`` permits. On any connection loss (or CLOSE_CONSUMER from the broker,
  which a seek causes) it looks the topic up again and resubscribes with backoff; messages
  that were queued but not yet received by the application are dropped (the broker sends them
  again) and the permits start afresh.
* **Receiver queue.** Permits count messages. One permit comes back per message handed to
  the application, per batch index skipped (already acknowledged, or before a reader's start),
  per non-final chunk and per discarded corrupt entry; FLOW is sent when half the queue's
  worth has accumulated.
* **Decoding.** Entry metadata, decompression bounded by the connection's
  ``max_message_size`` (the default 160 MiB bound for reassembled chunked messages), batch
  unpacking with per-message ids carrying ``batch_index`` and ``batch_size``, chunk
  reassembly (``ChunkAssembler``). A corrupt entry (bad checksum, codec or batch) is
  acknowledged with its validation error and dropped, as the official clients do.
* **Acknowledgements** go out grouped: every ack made in one turn of the event loop leaves in
  one ACK frame. Batches: see ``client.acks``. Cumulative acks inside a batch without
  batch-index acks acknowledge the previous entry (C++ behaviour).
* **Redelivery.** ``negative_acknowledge`` asks for redelivery after
  ``negative_ack_redelivery_delay_ms``; ``unacked_messages_timeout_ms`` > 0 does the same for
  messages received but not acknowledged in time. Shared/Key_Shared send the entries' ids;
  Exclusive/Failover redeliver everything unacknowledged (the broker rewinds), which also
  clears the receiver queue.
* **Seek** by id or publish time: the broker disconnects the consumer, resets the cursor and
  answers; ``seek`` returns once the consumer has resubscribed.
* **Readers** (``durable=False``): the subscription starts at ``start_message_id``; messages
  before it (inclusive or not) are filtered out here, inside batches too; after a reconnection
  the reader resumes after the last message it handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from client.acks import BatchAcks, EntryKey, ack_set_words, unacked_indexes
from client.chunking import ChunkAssembler, ChunkOutcome, is_chunk
from client.config import ClientConfig
from client.errors import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    Disconnected,
    InvalidConfiguration,
    NotConnected,
    PulsarException,
    Timeout,
)
from client.message import Message, PayloadDecoder
from client.message_id import MessageId
from protocol import (
    Frame,
    RemoteProtocolError,
    commands,
    compression,
    decode_entry,
    pb,
    split_batch,
)
from protocol.commands import AckIdentity
from protocol.enums import AckType, AckValidationError, InitialPosition, SubType
from protocol.ids import MessageId as WireMessageId
from protocol.ids import from_u64
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from client.connection import Connection
    from client.dead_letter import DeadLetterSender

__all__ = ["AsyncConsumer", "ConsumerConfig", "ConsumerHost", "ConsumerType"]

logger = logging.getLogger(__name__)

ConsumerType = SubType
"""The official ``pulsar.ConsumerType`` names: Exclusive, Shared, Failover, KeyShared."""


class PayloadSchema(PayloadDecoder, Protocol):
    """What a consumer needs of a schema: decode, and its wire form for SUBSCRIBE."""

    def to_pb(self) -> pb.Schema | None: ...


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """``subscribe`` options (the official names and defaults)."""

    subscription_name: str
    consumer_type: SubType = SubType.Exclusive
    initial_position: InitialPosition = InitialPosition.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    schema: PayloadSchema | None = None
    batch_index_ack_enabled: bool = False
    negative_ack_redelivery_delay_ms: int = 60_000
    unacked_messages_timeout_ms: int = 0
    durable: bool = True
    start_message_id: MessageId | None = None
    start_message_id_inclusive: bool = False
    #: The official ``is_read_compacted``: the compacted view, then the log after its horizon.
    read_compacted: bool = False

    def __post_init__(self) -> None:
        if self.receiver_queue_size < 1:
            raise InvalidConfiguration("receiver_queue_size must be >= 1")
        if self.unacked_messages_timeout_ms < 0 or self.negative_ack_redelivery_delay_ms < 0:
            raise InvalidConfiguration("redelivery delays must be >= 0")


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


_I64_MAX = (1 << 63) - 1
_SHARED_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})
# Acknowledgements are grouped as the C++ client does (ackGroupingTimeMs 100,
# ackGroupingMaxSize 1000): one ACK command per 100 ms or per 1000 ids, whichever comes first.
_ACK_GROUPING_TIME = 0.1
_ACK_GROUPING_MAX_SIZE = 1000


def _key(message_id: MessageId | WireMessageId) -> EntryKey:
    if isinstance(message_id, MessageId):
        return (message_id.ledger_id(), message_id.entry_id())
    return (message_id.ledger_id, message_id.entry_id)


def _entry(key: EntryKey) -> WireMessageId:
    return WireMessageId(key[0], key[1])


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
        # The partition index (-1: not a partition) that the ids of received messages carry.
        self._partition = TopicName.parse(topic, allow_non_persistent=True).partition
        self._consumer_id = consumer_id
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._state = _State.CONNECTING
        self._cnx: Connection | None = None
        self._creating_on: Connection | None = None
        self._created: asyncio.Future[None] = self._loop.create_future()
        self._connect_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._queue: deque[Message] = deque()
        # A blocking ``Consumer`` on another thread takes queued messages without a loop round
        # trip (``take_queued``); the lock makes "pop and owe its permit" atomic against a
        # clear of the queue, which folds the owed permits in as if returned at the pop.
        self._handoff_lock = threading.Lock()
        self._owed_permits = 0
        # Blocking receivers waiting in other threads for the queue to fill (``wait_queued``).
        self._threads_waiting = 0
        self._thread_wakeup = threading.Event()
        self._arrived = asyncio.Event()
        self._ready = asyncio.Event()  # subscribed on a live connection
        self._permits = 0  # consumed since the last FLOW
        self._flow_threshold = max(1, config.receiver_queue_size // 2)
        # A blocking receiver returns its permits in groups of this size (``take_queued``).
        self._owed_permits_flush = max(1, self._flow_threshold // 4)
        self._assembler = ChunkAssembler()
        self._chunks: dict[EntryKey, tuple[WireMessageId, ...]] = {}  # last chunk -> all
        self._batches = BatchAcks()
        self._acks: list[AckIdentity] = []
        self._ack_flush_timer: asyncio.TimerHandle | None = None
        self._unacked: dict[EntryKey, float] = {}  # received, not acked: when it times out
        self._nacked: dict[EntryKey, float] = {}  # when to ask for redelivery
        self._redelivery_timer: asyncio.TimerHandle | None = None
        # Readers: filter what precedes the start, and resume after the last message handed out.
        self._start: MessageId | None = config.start_message_id
        self._start_inclusive = config.start_message_id_inclusive
        self._filters_start = self._start is not None and not config.durable
        self._last_dequeued: MessageId | None = None
        # Dead-letter policy (Shared/Key_Shared): messages on their last delivery, by entry.
        self._dead_letter = dead_letter
        self._last_deliveries: dict[EntryKey, list[Message]] = {}
        # Whether handing a message out needs more than a permit (skipped on the hot path).
        self._tracks_handouts = dead_letter is not None or (
            config.unacked_messages_timeout_ms > 0 and config.durable
        )
        self._dead_letter_tasks: set[asyncio.Task[None]] = set()

    # --- what the application sees ------------------------------------------------------

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._config.subscription_name

    def is_connected(self) -> bool:
        return self._state is _State.READY

    def is_receiving(self) -> bool:
        """Open: subscribed, or subscribing again after a connection loss."""
        return self._state is _State.READY or self._state is _State.CONNECTING

    def owes_permits(self) -> bool:
        """Whether a blocking receiver took messages whose permits are not returned yet."""
        return self._owed_permits > 0

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; wait at most ``timeout_millis`` (None: forever).

        Raises:
            Timeout: nothing arrived in time.
            AlreadyClosed: the consumer is (or gets) closed.
        """
        if self._queue:  # fast path: no timeout scope, no wait
            return self._hand_out(self._queue.popleft())
        if self._owed_permits:  # a blocking receiver's, not yet returned: before waiting
            self._settle_owed_permits()
        try:
            async with asyncio.timeout(None if timeout_millis is None else timeout_millis / 1000):
                while not self._queue:
                    self._check_open()
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            raise Timeout(f"no message within {timeout_millis} ms") from None
        return self._hand_out(self._queue.popleft())

    def receive_nowait(self) -> Message | None:
        """The next queued message, or None (no waiting)."""
        self._check_open()
        return self._hand_out(self._queue.popleft()) if self._queue else None

    async def batch_receive(
        self, max_num_messages: int = 100, timeout_ms: int = 100
    ) -> list[Message]:
        """Messages received until ``max_num_messages`` or ``timeout_ms`` (the official default
        policy's limits); an empty list when nothing came in time."""
        out: list[Message] = []
        deadline = self._loop.time() + timeout_ms / 1000
        while len(out) < max_num_messages:
            if self._queue:
                out.append(self._hand_out(self._queue.popleft()))
                continue
            left = deadline - self._loop.time()
            if left <= 0:
                break
            try:
                out.append(await self.receive(max(1, int(left * 1000))))
            except Timeout:
                break
        return out

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent grouped, at the end of this loop turn)."""
        self._check_open()
        message_id = message.message_id() if message.__class__ is Message else _id_of(message)
        ledger, entry_id, batch_index, batch_size = message_id.position()
        key = (ledger, entry_id)
        if batch_index >= 0 and batch_size > 0:  # one message of a batch (PIP-54)
            unacked = self._batches.ack(key, batch_index, batch_size)
            if self._last_deliveries:
                self._forget_last_delivery(key, batch_index)
            if unacked:
                if self._config.batch_index_ack_enabled:
                    self._queue_ack((_entry(key), ack_set_words(unacked, batch_size)))
                return
        else:
            first_chunk = message_id.first_chunk()
            if first_chunk is not None:
                for chunk in self._chunks.pop(key, (first_chunk, message_id.wire)):
                    self._queue_ack(_entry(_key(chunk)))
                self._untrack(key)
                return
        self._queue_ack(_entry(key))
        self._untrack(key)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one (not on Shared/Key_Shared).

        Raises:
            CumulativeAcknowledgementNotAllowedError: a Shared or Key_Shared subscription.
        """
        self._check_open()
        if self._config.consumer_type in _SHARED_TYPES:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/Key_Shared subscriptions"
            )
        message_id = _id_of(message)
        key = _key(message_id)
        target: AckIdentity | None = _entry(key)
        batch_size = message_id.batch_size()
        if message_id.batch_index() >= 0 and batch_size > 0:
            unacked = self._batches.ack_up_to(key, message_id.batch_index(), batch_size)
            if unacked and self._config.batch_index_ack_enabled:
                target = (_entry(key), ack_set_words(unacked, batch_size))
            elif unacked:  # the entry is not done: acknowledge up to the previous one
                target = WireMessageId(key[0], key[1] - 1) if key[1] > 0 else None
        for done in [k for k in self._unacked if k <= key]:
            del self._unacked[done]
        if target is not None:
            self._write_ack(commands.ack(self._consumer_id, [target], ack_type=AckType.Cumulative))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message delivered again after ``negative_ack_redelivery_delay_ms``."""
        self._check_open()
        message_id = _id_of(message)
        key = _key(message_id)
        due = self._loop.time() + self._config.negative_ack_redelivery_delay_ms / 1000
        self._unacked.pop(key, None)
        first_chunk = message_id.first_chunk()
        if first_chunk is not None:
            for chunk in self._chunks.get(key, (first_chunk, message_id.wire)):
                self._nacked[_key(chunk)] = due
        else:
            self._nacked[key] = due
        self._arm_redelivery_timer(due)

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to deliver again every message not acknowledged yet."""
        self._check_open()
        self._redeliver_all()

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id (inclusive) or a publish time (ms).

        Returns once the consumer has resubscribed at the new position.
        """
        self._check_open()
        cnx = self._cnx
        if cnx is None:
            raise NotConnected(f"consumer on {self._topic} is not connected")
        if isinstance(target, MessageId):
            wire = target.wire
            if not self._config.durable:  # a reader filters from the new start
                self._start = target
                self._start_inclusive = self._config.start_message_id_inclusive
                self._filters_start = True

            def build(rid: int) -> bytes:
                return commands.seek(self._consumer_id, rid, message_id=wire)
        else:
            self._start = None  # a time seek turns the start filter off
            self._filters_start = False
            publish_time = int(target)

            def build(rid: int) -> bytes:
                return commands.seek(self._consumer_id, rid, publish_time=publish_time)

        self._last_dequeued = None
        self._ready.clear()
        dropped = self._clear_queue()
        try:
            await cnx.request(build)
        finally:
            if self._cnx is cnx and cnx.is_ready and self._state is _State.READY:
                # The broker did not disconnect us: give back the permits of what was dropped.
                self._ready.set()
                self._return_permits(dropped)
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
        self._check_open()
        await self._wait_ready()
        cnx = self._cnx
        if cnx is None:
            raise NotConnected(f"consumer on {self._topic} is not connected")
        # Grouped acknowledgements leave first: the broker answers a connection's commands in
        # order, so the answer also tells the caller they arrived.
        self._flush_acks()
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
        return len(self._queue)

    @property
    def last_dequeued(self) -> MessageId | None:
        return self._last_dequeued

    @property
    def start_message_id(self) -> MessageId | None:
        return self._start

    @property
    def start_inclusive(self) -> bool:
        return self._start_inclusive

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close."""
        self._check_open()
        await self._wait_ready()
        cnx = self._cnx
        if cnx is None:
            raise NotConnected(f"consumer on {self._topic} is not connected")
        self._flush_acks()
        await cnx.request(lambda rid: commands.unsubscribe(self._consumer_id, rid))
        cnx.remove_consumer(self._consumer_id, self)
        self._cnx = None
        await self.close()

    async def close(self) -> None:
        """Send pending acknowledgements, detach from the broker; idempotent."""
        if self._close_task is None:
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

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

    def take_queued(self) -> tuple[Message, bool] | None:
        """Thread-safe: the next queued message for a blocking receiver on another thread, or
        None. With it comes whether the caller must then run ``settle_taken(message)`` on the
        loop, before any acknowledgement of it (the blocking facade's FIFO inbox keeps that
        order): always when handing out needs bookkeeping (ack timeout, dead letters), else
        only every few messages, to return the permits owed so far in one go."""
        with self._handoff_lock:
            if not self._queue:
                return None
            message = self._queue.popleft()
            self._owed_permits += 1
            self._last_dequeued = message.message_id()
            settle = self._tracks_handouts or self._owed_permits >= self._owed_permits_flush
        return message, settle

    def wait_queued(self, timeout: float | None) -> None:
        """Thread-safe: block the calling thread (not the loop) until a message is queued, the
        consumer closes, or ``timeout`` seconds pass; the caller then looks again. Much cheaper
        than a round trip through the loop for every message that is not queued yet."""
        with self._handoff_lock:
            # Register before looking at the queue: an enqueue either happened before the look
            # (seen here) or after the registration (it sets the event).
            self._threads_waiting += 1
            self._thread_wakeup.clear()
            empty = not self._queue and self.is_receiving()
        try:
            if empty:
                self._thread_wakeup.wait(timeout)
        finally:
            with self._handoff_lock:
                self._threads_waiting -= 1

    def settle_taken(self, message: Message | None) -> None:
        """On the loop: the bookkeeping of ``_hand_out`` for messages ``take_queued`` took
        (``message``: the one to track, when tracking is on)."""
        if message is not None and self._tracks_handouts:
            self._track_handed_out(message, message.message_id())
        self._settle_owed_permits()

    def _settle_owed_permits(self) -> None:
        with self._handoff_lock:
            owed, self._owed_permits = self._owed_permits, 0
        if owed:
            self._return_permits(owed)

    def _hand_out(self, message: Message) -> Message:
        message_id = message.message_id()
        self._last_dequeued = message_id
        if self._tracks_handouts:
            self._track_handed_out(message, message_id)
        self._permits += 1
        if self._permits >= self._flow_threshold:
            self._return_permits(0)
        return message

    def _track_handed_out(self, message: Message, message_id: MessageId) -> None:
        if self._dead_letter is not None and self._dead_letter.is_last_delivery(message):
            self._last_deliveries.setdefault(_key(message_id), []).append(message)
        if self._config.unacked_messages_timeout_ms > 0 and self._config.durable:
            due = self._loop.time() + self._config.unacked_messages_timeout_ms / 1000
            self._unacked.setdefault(_key(message_id), due)
            self._arm_redelivery_timer(due)

    def _return_permits(self, count: int) -> None:
        self._permits += count
        if self._permits >= self._flow_threshold:
            cnx = self._cnx
            if cnx is not None and self._state is _State.READY:
                cnx.write(commands.flow(self._consumer_id, self._permits))
                self._permits = 0

    def _forget_last_delivery(self, key: EntryKey, batch_index: int) -> None:
        """An acknowledged message of a batch is not dead-lettered with its entry."""
        messages = self._last_deliveries.get(key)
        if messages:
            kept = [m for m in messages if m.message_id().batch_index() != batch_index]
            if kept:
                self._last_deliveries[key] = kept
            else:
                del self._last_deliveries[key]

    def _untrack(self, key: EntryKey) -> None:
        if self._unacked:
            self._unacked.pop(key, None)
        if self._nacked:
            self._nacked.pop(key, None)
        if self._last_deliveries:
            self._last_deliveries.pop(key, None)

    def _queue_ack(self, item: AckIdentity) -> None:
        acks = self._acks
        acks.append(item)
        if len(acks) >= _ACK_GROUPING_MAX_SIZE:
            self._flush_acks()
        elif self._ack_flush_timer is None:
            self._ack_flush_timer = self._loop.call_later(_ACK_GROUPING_TIME, self._flush_acks)

    def _flush_acks(self) -> None:
        timer, self._ack_flush_timer = self._ack_flush_timer, None
        if timer is not None:
            timer.cancel()
        if not self._acks:
            return
        cnx = self._cnx
        if cnx is None or not cnx.is_ready:
            return  # kept: sent once subscribed again
        acks, self._acks = self._acks, []
        cnx.write(commands.ack(self._consumer_id, acks))

    def _write_ack(self, frame: bytes) -> None:
        self._flush_acks()  # keep the order of individual and cumulative acks
        cnx = self._cnx
        if cnx is not None:
            cnx.write(frame)

    # --- internals: redelivery ----------------------------------------------------------

    def _arm_redelivery_timer(self, due: float) -> None:
        timer = self._redelivery_timer
        if timer is not None and timer.when() <= due:
            return
        if timer is not None:
            timer.cancel()
        self._redelivery_timer = self._loop.call_at(due, self._on_redelivery_timer)

    def _on_redelivery_timer(self) -> None:
        self._redelivery_timer = None
        if self._state is not _State.READY:
            if self._state is _State.CONNECTING:
                self._arm_redelivery_timer(self._loop.time() + 0.1)
            return
        now = self._loop.time()
        due = [
            key for table in (self._nacked, self._unacked) for key, t in table.items() if t <= now
        ]
        for key in due:
            self._nacked.pop(key, None)
            self._unacked.pop(key, None)
        due = self._dead_letter_due(due)
        if due:
            if self._config.consumer_type in _SHARED_TYPES:
                ids = [_entry(key) for key in sorted(set(due))]
                for start in range(0, len(ids), 1000):
                    self._write_ack(
                        commands.redeliver_unacknowledged_messages(
                            self._consumer_id, ids[start : start + 1000]
                        )
                    )
            else:
                self._redeliver_all()
        pending = [*self._nacked.values(), *self._unacked.values()]
        if pending:
            self._arm_redelivery_timer(min(pending))

    def _dead_letter_due(self, due: list[EntryKey]) -> list[EntryKey]:
        """Send the due messages on their last delivery to the dead-letter topic; the rest."""
        if self._dead_letter is None or self._config.consumer_type not in _SHARED_TYPES:
            return due
        rest = []
        for key in dict.fromkeys(due):
            messages = self._last_deliveries.pop(key, None)
            if messages is None:
                rest.append(key)
                continue
            task = self._loop.create_task(self._send_to_dead_letter(key, messages))
            self._dead_letter_tasks.add(task)
            task.add_done_callback(self._dead_letter_tasks.discard)
        return rest

    async def _send_to_dead_letter(self, key: EntryKey, messages: list[Message]) -> None:
        assert self._dead_letter is not None
        try:
            await self._dead_letter.send(messages)
        except Exception as exc:  # never acknowledged unsent: redelivered instead
            logger.warning("%s: dead-letter publication failed, redelivering: %r", self, exc)
            if self._state is _State.READY:
                self._write_ack(
                    commands.redeliver_unacknowledged_messages(self._consumer_id, [_entry(key)])
                )
            return
        if self._state is _State.READY or self._state is _State.CONNECTING:
            for message in messages:
                self.acknowledge(message)

    def _redeliver_all(self) -> None:
        """Exclusive/Failover redelivery: the broker rewinds; what is queued comes again."""
        self._unacked.clear()
        self._nacked.clear()
        dropped = self._clear_queue()
        cnx = self._cnx
        if cnx is not None:
            self._flush_acks()
            cnx.write(commands.redeliver_unacknowledged_messages(self._consumer_id))
        self._return_permits(dropped)

    def _clear_queue(self) -> int:
        with self._handoff_lock:
            dropped = len(self._queue)
            self._queue.clear()
            self._permits += self._owed_permits  # taken before the clear: returned by then
            self._owed_permits = 0
        self._assembler.clear()
        return dropped

    # --- internals: MESSAGE --------------------------------------------------------------

    def on_message(self, frame: Frame) -> None:
        command = frame.command.message
        received = command.message_id  # the entry's position only: one id object, not two
        ledger, entry_id = from_u64(received.ledgerId), from_u64(received.entryId)
        assert frame.entry is not None
        if not frame.checksum_valid:
            self._discard(WireMessageId(ledger, entry_id), AckValidationError.ChecksumMismatch, 1)
            return
        try:
            metadata, payload = decode_entry(frame.entry)
        except RemoteProtocolError:
            self._discard(
                WireMessageId(ledger, entry_id), AckValidationError.BatchDeSerializeError, 1
            )
            return
        cnx = self._cnx
        bound = cnx.max_message_size if cnx is not None else compression.DEFAULT_MAX_MESSAGE_SIZE
        message_id: MessageId | None = None
        if metadata.num_chunks_from_msg and is_chunk(metadata):
            wire = WireMessageId(ledger, entry_id)
            outcome = self._assembler.add(metadata, payload, wire, int(time.time() * 1000))
            self._chunk_outcome(outcome)
            if outcome.message is None:
                self._return_permits(1)
                return
            metadata, payload = outcome.message.metadata, outcome.message.payload
            ids = outcome.message.chunk_ids
            message_id = MessageId.from_wire(
                dataclasses.replace(ids[-1], partition=self._partition), first_chunk=ids[0]
            )
            self._chunks[_key(ids[-1])] = ids
            bound = compression.DEFAULT_MAX_UNCOMPRESSED_SIZE
        is_batch = metadata.HasField("num_messages_in_batch")
        count = metadata.num_messages_in_batch if is_batch else 1
        if metadata.compression:
            try:
                payload = compression.decode(
                    metadata.compression,
                    payload,
                    metadata.uncompressed_size,
                    max_uncompressed_size=bound,
                )
            except compression.CompressionError as exc:
                logger.warning("%s: discarding %s:%s: %s", self, ledger, entry_id, exc)
                self._discard(WireMessageId(ledger, entry_id), exc.validation_error, count)
                return
        if not is_batch:
            if message_id is None:
                message_id = MessageId.of_entry(ledger, entry_id, -1, 0, self._partition)
            if self._filters_start and self._before_start(message_id):
                self._return_permits(1)
                return
            self._queue.append(
                Message(
                    payload,
                    message_id,
                    self._topic,
                    metadata,
                    redelivery_count=command.redelivery_count,
                    schema=self._config.schema,
                )
            )
            self._wake()
            return
        self._on_batch(command, ledger, entry_id, metadata, payload, count)

    def _on_batch(
        self,
        command: pb.CommandMessage,
        ledger: int,
        entry_id: int,
        metadata: pb.MessageMetadata,
        payload: bytes,
        count: int,
    ) -> None:
        """Queue the messages of a batch entry the broker still has to deliver to us."""
        try:
            records = split_batch(payload, count)
        except (RemoteProtocolError, ValueError) as exc:
            logger.warning("%s: discarding batch %s:%s: %s", self, ledger, entry_id, exc)
            self._discard(
                WireMessageId(ledger, entry_id), AckValidationError.BatchDeSerializeError, count
            )
            return
        # An ack set names the indexes still unacknowledged (a redelivery after partial acks).
        to_deliver = unacked_indexes(command.ack_set, count) if command.ack_set else None
        if self._config.durable:
            self._batches.delivered(
                (ledger, entry_id), count, set(range(count)) if to_deliver is None else to_deliver
            )
        topic, schema, redelivery = self._topic, self._config.schema, command.redelivery_count
        filters_start, partition = self._filters_start, self._partition
        of_entry, from_batch, append = MessageId.of_entry, Message.from_batch, self._queue.append
        skipped = 0
        for index, (single, data) in enumerate(records):
            batch_id = of_entry(ledger, entry_id, index, count, partition)
            if (to_deliver is not None and index not in to_deliver) or (
                filters_start and self._before_start(batch_id)
            ):
                skipped += 1
                continue
            append(from_batch(topic, batch_id, metadata, single, data, redelivery, schema))
        if skipped < count:
            self._wake()
        if skipped:
            self._return_permits(skipped)

    def _before_start(self, message_id: MessageId) -> bool:
        """A reader's filter: is this message before its start (or the start, exclusive)?"""
        start = self._start
        if start is None or self._config.durable or start.entry_id() in (-1, _I64_MAX):
            return False  # earliest and latest are not positions of a message
        if start.batch_index() < 0 and message_id.batch_index() >= 0:
            # A whole-entry start id against a batch: the entry is the start message.
            entry = (message_id.ledger_id(), message_id.entry_id())
            start_entry = (start.ledger_id(), start.entry_id())
            return entry < start_entry or (entry == start_entry and not self._start_inclusive)
        if self._start_inclusive:
            return message_id < start
        return message_id <= start

    def _enqueue(self, message: Message) -> None:
        self._queue.append(message)
        self._wake()

    def _wake(self) -> None:
        """Something was queued (or the consumer closes): wake receivers on the loop and in
        other threads."""
        self._arrived.set()
        if self._threads_waiting:
            self._thread_wakeup.set()

    def _discard(self, wire: WireMessageId, error: AckValidationError | int, permits: int) -> None:
        cnx = self._cnx
        if cnx is not None and self._config.durable:
            self._write_ack(commands.ack(self._consumer_id, [wire], validation_error=int(error)))
        self._return_permits(permits)

    def _chunk_outcome(self, outcome: ChunkOutcome) -> None:
        for wire in outcome.ack:
            self._queue_ack(wire)
        if outcome.redeliver:
            self._write_ack(
                commands.redeliver_unacknowledged_messages(self._consumer_id, outcome.redeliver)
            )

    # --- internals: connection events ---------------------------------------------------

    def on_active_consumer_change(self, is_active: bool) -> None:
        logger.info("%s: active=%s", self, is_active)

    def on_reached_end_of_topic(self) -> None:
        logger.info("%s: reached the end of the topic", self)
        self._reached_end_of_topic = True

    def has_reached_end_of_topic(self) -> bool:
        """The topic was terminated and every message was delivered (REACHED_END_OF_TOPIC), as
        the Java client's ``hasReachedEndOfTopic``."""
        return getattr(self, "_reached_end_of_topic", False)

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
            resume = self._last_dequeued or self._start
            start = (resume or MessageId.earliest).wire
            if self._last_dequeued is not None:
                self._start, self._start_inclusive = self._last_dequeued, False
        return commands.subscribe(
            self._topic,
            config.subscription_name,
            self._consumer_id,
            request_id,
            config.consumer_type,
            consumer_name=config.consumer_name,
            durable=config.durable,
            start_message_id=start,
            metadata=config.properties,
            schema=schema,
            initial_position=config.initial_position,
            read_compacted=config.read_compacted or None,
        )

    async def _subscribe_on(self, cnx: Connection) -> None:
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
        self._permits = 0
        if self._state is _State.CONNECTING:
            self._state = _State.READY
        cnx.write(commands.flow(self._consumer_id, self._config.receiver_queue_size))
        self._flush_acks()
        self._ready.set()
        logger.info("%s: subscribed on %s", self, cnx.physical)
        if not self._created.done():
            self._created.set_result(None)

    # --- closing ------------------------------------------------------------------------

    async def _close(self) -> None:
        was = self._state
        self._state = _State.CLOSING
        self._wake()  # wake receivers: they see AlreadyClosed
        if self._redelivery_timer is not None:
            self._redelivery_timer.cancel()
            self._redelivery_timer = None
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
            acks, self._acks = self._acks, []
            if acks and cnx.is_ready:
                cnx.write(commands.ack(self._consumer_id, acks))
            cnx.remove_consumer(self._consumer_id, self)
            if cnx.is_ready:
                try:
                    await cnx.request(lambda rid: commands.close_consumer(self._consumer_id, rid))
                except PulsarException as exc:
                    logger.info("%s: close not confirmed by the broker: %r", self, exc)
        self._queue.clear()
        for task in list(self._dead_letter_tasks):
            task.cancel()
        await asyncio.gather(*self._dead_letter_tasks, return_exceptions=True)
        if self._dead_letter is not None:
            await self._dead_letter.close()
        self._state = _State.CLOSED
        self._host.consumer_closed(self)

    def __repr__(self) -> str:
        return (
            f"<AsyncConsumer {self._config.subscription_name} on {self._topic} "
            f"({self._state.value})>"
        )


def _id_of(message: Message | MessageId) -> MessageId:
    if isinstance(message, Message):
        return message.message_id()
    if isinstance(message, MessageId):
        return message
    raise TypeError(f"expected a Message or MessageId, not {type(message).__name__}")


def consumer_config(**options: Any) -> ConsumerConfig:
    """A ``ConsumerConfig`` from keyword options (enums accepted as ints)."""
    if "consumer_type" in options:
        options["consumer_type"] = SubType(int(options["consumer_type"]))
    if "initial_position" in options:
        options["initial_position"] = InitialPosition(int(options["initial_position"]))
    return ConsumerConfig(**options)
