"""One client connection: the only broker module that reads and writes sockets.

Rules (h11/h2 style, see aesthetics §2):

1. Bytes go into a sans-I/O ``FrameDecoder``; complete frames come out and are dispatched through
   a table to one ``_on_<command>`` handler each. A malformed frame, a command before CONNECT or a
   command we do not serve closes **this** connection only, with a rate-limited log line that
   never contains the payload.
2. Replies are queued and written once per event-loop turn (one ``transport.write`` for all frames
   produced by one ``data_received``): a write per frame caps a Python loop at ~120k frames/s.
3. The read loop never waits for a durable write: SEND hands the entry to the topic and goes on
   with the next frame; receipts go out in SEND order per producer when the group commit is done.
   Past ``maxPendingPublishRequestsPerConnection`` in-flight SENDs, reading pauses.
4. Domain errors (``BrokerError``) become ERROR / SEND_ERROR frames in exactly one place
   (``broker.errors.to_wire``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from broker.consumer import Consumer
from broker.dedup import batch_highest_sequence_id
from broker.errors import (
    BrokerError,
    ConsumerBusy,
    InvalidTopicName,
    MetadataError,
    ProducerFenced,
    to_wire,
)
from broker.logging_setup import RateLimitedLog
from broker.producer import Producer
from broker.producer_access import AccessMode
from broker.storage import Position
from broker.subscription import Subscription, SubType
from protocol import commands, pb
from protocol.errors import ProtocolError, ServerError
from protocol.framing import SUB_MESSAGE_NAME, Frame, FrameDecoder
from protocol.ids import MessageId, from_u64
from protocol.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from broker.server import BrokerService
    from broker.topic import Topic

log = logging.getLogger(__name__)
_bad_input_log = RateLimitedLog(log, limit=5, interval=60.0)

SERVER_VERSION = "Magnetar 0.1.0 (Pulsar 4.0 protocol)"
MAX_PROTOCOL_VERSION = 20
T = pb.BaseCommand.Type


@dataclass(eq=False)
class _PendingSend:
    sequence_id: int
    highest_sequence_id: int
    future: asyncio.Future[Position | None]


@dataclass(eq=False)
class _ProducerState:
    producer: Producer
    topic: Topic
    receipts: deque[_PendingSend] = field(default_factory=deque)


@dataclass(eq=False)
class _ConsumerState:
    consumer: Consumer
    subscription: Subscription
    topic: Topic


def _command_name(kind: int) -> str:
    return SUB_MESSAGE_NAME.get(kind, str(kind)).upper()


def _position(message_id: pb.MessageIdData) -> Position:
    return Position(from_u64(message_id.ledgerId), from_u64(message_id.entryId))


class ServerConnection(asyncio.Protocol):
    """asyncio Protocol for one Pulsar client connection."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._config = service.config
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(max_frame_size=self._config.frame_limit)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._connected = False
        self._closing = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._write_high_water = self._config.connection_write_buffer_high_water_mark_bytes
        self._dispatch_deferred = False
        self._flush_scheduled = False
        self._writable = True
        self._reading_paused = False
        self._producers: dict[int, _ProducerState] = {}
        self._closing_producers: set[_ProducerState] = set()
        self._consumers: dict[int, _ConsumerState] = {}
        self._pending_publishes = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._frame_seen = True
        self._alive_waiters: list[asyncio.Future[None]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._closed = asyncio.Event()
        self.client_version = ""
        self.created_at = time.time()

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both offer this interface.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._transport.set_write_buffer_limits(
            high=self._config.connection_write_buffer_high_water_mark_bytes,
            low=self._config.connection_write_buffer_low_water_mark_bytes,
        )
        self._service.connections.add(self)
        self._timers.append(
            self._loop.call_later(
                self._config.connection_handshake_timeout_seconds, self._handshake_deadline
            )
        )
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._frame_seen = True
        try:
            self._decoder.feed(data)
            for frame in self._decoder:
                self._dispatch(frame)
                if self._closing:
                    return
        except ProtocolError as exc:
            self._close_for_bad_input(str(exc))
        self._wake_alive_waiters()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._closed.set()
        self._service.connections.discard(self)
        for timer in self._timers:
            timer.cancel()
        for waiter in self._alive_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionError("connection closed"))
        self._alive_waiters.clear()
        for state in list(self._consumers.values()):
            state.subscription.remove_consumer(state.consumer)
        self._consumers.clear()
        # Cancel this connection's own work first: cancelling after spawning the removals would
        # cancel them before they ever ran, leaving a dead exclusive holder on its topic.
        for task in self._tasks:
            task.cancel()
        # Producers whose CLOSE_PRODUCER was still in progress are removed too (idempotent).
        producers = list(self._producers.values()) + list(self._closing_producers)
        self._producers.clear()
        self._closing_producers.clear()
        for pstate in producers:
            self._spawn(pstate.topic.remove_producer(pstate.producer))

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._reschedule_dispatch()

    def _reschedule_dispatch(self) -> None:
        for state in self._consumers.values():
            state.subscription.schedule_dispatch()

    # ------------------------------------------------------------------ output

    def _write(self, frame: bytes) -> None:
        if self._closing:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        if self._closing or self._transport is None or not self._out:
            self._out.clear()
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_bytes = 0
        self._transport.write(data)
        if self._dispatch_deferred and self._writable:
            # Dispatch stopped because this turn's output was already large; go on now that
            # it is in the transport (which calls pause_writing if it is above the mark).
            self._dispatch_deferred = False
            self._reschedule_dispatch()

    def close(self) -> None:
        """Close the connection (after writing what is queued)."""
        if self._transport is None or self._closing:
            return
        self._flush_out()
        self._closing = True
        self._transport.close()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _close_for_bad_input(self, reason: str) -> None:
        _bad_input_log.warning(self._peer, "closing connection from %s: %s", self._peer, reason)
        self.close()

    # ------------------------------------------------------------------ timers

    def _handshake_deadline(self) -> None:
        if not self._connected and not self._closing:
            self._close_for_bad_input("no CONNECT before the handshake deadline")

    def _schedule_keepalive(self) -> None:
        self._timers.append(
            self._loop.call_later(self._config.keep_alive_interval_seconds, self._keepalive_tick)
        )

    def _keepalive_tick(self) -> None:
        if self._closing:
            return
        if not self._frame_seen:
            log.info("closing %s after keep-alive timeout", self._peer)
            self.close()
            return
        self._frame_seen = False
        if self._connected:
            self._write(commands.ping())
        self._timers = [t for t in self._timers if not t.cancelled()][-4:]
        self._schedule_keepalive()

    def _wake_alive_waiters(self) -> None:
        if self._alive_waiters:
            for waiter in self._alive_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._alive_waiters.clear()

    async def check_alive(self) -> bool:
        """Ping the client; True if any frame comes back within a few seconds."""
        if self._closing or self._transport is None:
            return False
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._alive_waiters.append(waiter)
        self._write(commands.ping())
        try:
            await asyncio.wait_for(
                waiter, timeout=min(5.0, self._config.keep_alive_interval_seconds)
            )
        except (TimeoutError, ConnectionError):
            return False
        return not self._closing

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, frame: Frame) -> None:
        kind = frame.type
        if not self._connected and kind != T.CONNECT:
            raise _CloseConnection(f"{_command_name(kind)} before CONNECT")
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise _CloseConnection(f"unsupported command {_command_name(kind)}")
        handler(self, frame)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection %s task failed", self._peer, exc_info=task.exception())

    def _reply_error(self, request_id: int, exc: BaseException) -> None:
        code, message = to_wire(exc)
        self._write(commands.error(request_id, code, message))

    def _request(self, request_id: int, work: Callable[[], Awaitable[None]]) -> None:
        """Run an async request handler; any BrokerError becomes ERROR{request_id}."""

        async def run() -> None:
            try:
                await work()
            except BrokerError as exc:
                self._reply_error(request_id, exc)
            except Exception as exc:
                log.exception("request %d on %s failed", request_id, self._peer)
                self._reply_error(request_id, exc)

        self._spawn(run())

    # ------------------------------------------------------------------ handshake / liveness

    def _on_connect(self, frame: Frame) -> None:
        if self._connected:
            raise _CloseConnection("second CONNECT")
        cmd = frame.command.connect
        self.client_version = cmd.client_version
        version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
        self._connected = True
        self._write(
            commands.connected(
                SERVER_VERSION,
                protocol_version=version,
                max_message_size=self._config.max_message_size,
            )
        )

    def _on_ping(self, frame: Frame) -> None:
        self._write(commands.pong())

    def _on_pong(self, frame: Frame) -> None:
        pass  # any frame counts as liveness (data_received)

    # ------------------------------------------------------------------ lookup

    def _parse_topic(self, name: str) -> TopicName:
        try:
            return TopicName.parse(name)
        except InvalidTopicNameError as exc:
            raise InvalidTopicName(str(exc)) from exc

    def _on_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitionMetadata
        request_id = cmd.request_id
        try:
            topic = self._parse_topic(cmd.topic)
            partitions = self._service.partitions_of(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._write(
                commands.partitioned_metadata_response(request_id, error=code, message=message)
            )
            return
        self._write(commands.partitioned_metadata_response(request_id, partitions))

    def _on_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookupTopic
        request_id = cmd.request_id
        listener = cmd.advertised_listener_name
        if listener:
            self._write(
                commands.lookup_response(
                    request_id,
                    error=ServerError.ServiceNotReady,
                    message=f"the broker do not have {listener} listener",
                )
            )
            return
        try:
            topic = self._parse_topic(cmd.topic)
            self._service.check_namespace(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._write(commands.lookup_response(request_id, error=code, message=message))
            return
        # "Connect to me", through the client's own service URL: the client keeps one socket.
        self._write(
            commands.lookup_response(
                request_id,
                self._service.service_url,
                authoritative=True,
                proxy_through_service_url=True,
            )
        )

    def _on_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        topics = self._service.topics_of_namespace(cmd.namespace)
        self._write(commands.get_topics_of_namespace_response(cmd.request_id, topics))

    # ------------------------------------------------------------------ schema

    def _on_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.getSchema
        version = cmd.schema_version if cmd.HasField("schema_version") else None
        found = self._service.schemas.get(cmd.topic, version)
        if found is None:
            self._write(
                commands.get_schema_response(
                    cmd.request_id,
                    error_code=ServerError.TopicNotFound,
                    error_message=f"Topic not found or no-schema {cmd.topic}",
                )
            )
            return
        schema_bytes, schema_version = found
        schema = pb.Schema()
        schema.ParseFromString(schema_bytes)
        self._write(
            commands.get_schema_response(
                cmd.request_id, schema=schema, schema_version=schema_version
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.getOrCreateSchema
        version = self._service.schemas.put(cmd.topic, cmd.schema.SerializeToString())
        self._write(commands.get_or_create_schema_response(cmd.request_id, schema_version=version))

    # ------------------------------------------------------------------ producers

    def _on_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        request_id = cmd.request_id
        self._request(request_id, lambda: self._create_producer(cmd, request_id))

    async def _create_producer(self, cmd: pb.CommandProducer, request_id: int) -> None:
        topic_name = self._parse_topic(cmd.topic)
        existing = self._producers.get(cmd.producer_id)
        if existing is not None:
            # Java answers a duplicate PRODUCER for a live producer id with success again.
            self._send_producer_success(existing.producer, existing.topic, request_id)
            return
        topic = await self._service.get_topic(topic_name, create=True)
        if cmd.HasField("schema"):
            self._service.schemas.put(topic_name.full_name, cmd.schema.SerializeToString())
        user_named = cmd.HasField("producer_name") and bool(cmd.producer_name)
        name = cmd.producer_name if user_named else self._service.generate_producer_name()
        producer = Producer(
            producer_id=cmd.producer_id,
            name=name,
            mode=AccessMode(cmd.producer_access_mode),
            sink=self,
            connection_key=self,
            request_id=request_id,
            user_provided_name=user_named,
        )
        state = _ProducerState(producer, topic)
        self._producers[cmd.producer_id] = state
        requested_epoch = cmd.topic_epoch if cmd.HasField("topic_epoch") else None
        try:
            ready = await topic.add_producer(producer, requested_epoch)
        except BaseException:
            if self._producers.get(cmd.producer_id) is state:
                del self._producers[cmd.producer_id]
            raise
        if self._closing:
            await topic.remove_producer(producer)
            return
        if cmd.HasField("initial_subscription_name") and cmd.initial_subscription_name:
            topic.get_or_create_subscription(
                cmd.initial_subscription_name, durable=True, start=None, initial_earliest=True
            )
        if ready:
            self._send_producer_success(producer, topic, request_id)
        else:
            self._write(
                commands.producer_success(
                    request_id, name, last_sequence_id=-1, producer_ready=False
                )
            )

    def _send_producer_success(self, producer: Producer, topic: Topic, request_id: int) -> None:
        self._write(
            commands.producer_success(
                request_id,
                producer.name,
                last_sequence_id=topic.last_sequence_id(producer.name),
                topic_epoch=producer.topic_epoch,
                producer_ready=True,
            )
        )

    # ProducerSink -------------------------------------------------------------------

    def close_producer(self, producer: Producer) -> None:
        state = self._producers.get(producer.producer_id)
        if state is not None and state.producer is producer:
            del self._producers[producer.producer_id]
        self._write(commands.close_producer(producer.producer_id))

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        state = self._producers.get(producer.producer_id)
        if state is None or state.producer is not producer:
            return
        self._send_producer_success(producer, state.topic, producer.request_id)

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        state = self._producers.get(producer.producer_id)
        if state is not None and state.producer is producer:
            del self._producers[producer.producer_id]
        self._reply_error(producer.request_id, error)

    # SEND -------------------------------------------------------------------------------

    def _on_send(self, frame: Frame) -> None:
        cmd = frame.command.send
        state = self._producers.get(cmd.producer_id)
        if state is None or not state.producer.ready:
            # Java drops SENDs of producers it just closed; the client resends after reconnect.
            return
        sequence_id = cmd.sequence_id
        if not frame.checksum_valid:
            self._write(
                commands.send_error(
                    cmd.producer_id,
                    sequence_id,
                    ServerError.ChecksumError,
                    "Checksum failed on the broker",
                )
            )
            return
        entry = frame.entry
        assert entry is not None
        highest = batch_highest_sequence_id(
            sequence_id,
            cmd.highest_sequence_id if cmd.HasField("highest_sequence_id") else None,
            cmd.num_messages if cmd.HasField("num_messages") else 1,
        )
        try:
            future = state.topic.publish(state.producer, sequence_id, highest, entry)
        except ProducerFenced:
            # PIP-68: nothing from a fenced producer reaches the ledger; the client learns it
            # on reconnect (its stale topic epoch is refused with ProducerFenced).
            self.close_producer(state.producer)
            return
        except BrokerError as exc:
            future = self._loop.create_future()
            future.set_exception(exc)
        state.producer.msg_in += 1
        state.receipts.append(_PendingSend(sequence_id, highest, future))
        self._pending_publishes += 1
        if self._pending_publishes >= self._config.max_pending_publish_requests_per_connection:
            self._pause_reading()
        future.add_done_callback(functools.partial(self._receipt_ready, state))

    def _receipt_ready(self, state: _ProducerState, _future: asyncio.Future[Any]) -> None:
        self._drain_receipts(state)

    def _drain_receipts(self, state: _ProducerState) -> None:
        receipts = state.receipts
        producer_id = state.producer.producer_id
        while receipts and receipts[0].future.done():
            pending = receipts.popleft()
            self._pending_publishes -= 1
            future = pending.future
            if future.cancelled():
                continue
            error = future.exception()
            if error is not None:
                code, message = to_wire(error)
                # Any SEND_ERROR but ChecksumError makes the C++ client reconnect and resend.
                self._write(commands.send_error(producer_id, pending.sequence_id, code, message))
                continue
            position = future.result()
            message_id = (
                MessageId(-1, -1)
                if position is None
                else MessageId(position.ledger_id, position.entry_id)
            )
            self._write(
                commands.send_receipt(
                    producer_id, pending.sequence_id, message_id, pending.highest_sequence_id
                )
            )
        if (
            self._reading_paused
            and self._pending_publishes
            <= self._config.max_pending_publish_requests_per_connection // 2
        ):
            self._resume_reading()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._closing:
            self._reading_paused = False
            self._transport.resume_reading()

    def _on_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        state = self._producers.get(cmd.producer_id)
        request_id = cmd.request_id

        async def close() -> None:
            if state is not None:
                if self._producers.get(cmd.producer_id) is state:
                    del self._producers[cmd.producer_id]
                self._closing_producers.add(state)
                # SUCCESS only after every earlier receipt (they are in the output queue first).
                pending = [p.future for p in state.receipts]
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                await state.topic.remove_producer(state.producer)
                self._closing_producers.discard(state)
            self._write(commands.success(request_id))

        self._request(request_id, close)

    # ------------------------------------------------------------------ consumers

    def _on_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        request_id = cmd.request_id
        self._request(request_id, lambda: self._subscribe(cmd, request_id))

    async def _subscribe(self, cmd: pb.CommandSubscribe, request_id: int) -> None:
        if not cmd.subscription:
            raise MetadataError("Empty subscription name")
        existing = self._consumers.get(cmd.consumer_id)
        if existing is not None:
            self._write(commands.success(request_id))
            return
        topic_name = self._parse_topic(cmd.topic)
        topic = await self._service.get_topic(topic_name, create=True)
        durable = cmd.durable
        start: MessageId | None = None
        if not durable and cmd.HasField("start_message_id"):
            start = MessageId.from_pb(cmd.start_message_id)
        subscription = topic.get_or_create_subscription(
            cmd.subscription,
            durable=durable,
            start=None if start is None else topic.reader_start(start),
            initial_earliest=cmd.initialPosition == pb.CommandSubscribe.Earliest,
        )
        consumer = Consumer(
            consumer_id=cmd.consumer_id,
            name=cmd.consumer_name,
            sink=self,
            priority_level=cmd.priority_level,
        )
        if self._closing:
            return
        subscription.add_consumer(consumer, SubType(cmd.subType))
        self._consumers[cmd.consumer_id] = _ConsumerState(consumer, subscription, topic)
        self._write(commands.success(request_id))

    def _consumer_state(self, consumer_id: int) -> _ConsumerState:
        state = self._consumers.get(consumer_id)
        if state is None:
            raise MetadataError("Consumer not found")
        return state

    def _on_flow(self, frame: Frame) -> None:
        cmd = frame.command.flow
        state = self._consumers.get(cmd.consumer_id)
        if state is not None:
            state.subscription.add_permits(state.consumer, cmd.messagePermits)

    def _on_ack(self, frame: Frame) -> None:
        cmd = frame.command.ack
        state = self._consumers.get(cmd.consumer_id)
        has_request = cmd.HasField("request_id")
        if state is None:
            if has_request:
                self._write(
                    commands.ack_response(
                        cmd.consumer_id,
                        cmd.request_id,
                        error=ServerError.ConsumerNotFound,
                        message="Consumer not found",
                    )
                )
            return
        try:
            if cmd.ack_type == pb.CommandAck.Cumulative:
                if cmd.message_id:
                    last = cmd.message_id[-1]
                    state.subscription.acknowledge_cumulative(
                        state.consumer, _position(last), list(last.ack_set) or None
                    )
            else:
                acks = [(_position(m), list(m.ack_set) or None) for m in cmd.message_id]
                state.subscription.acknowledge(state.consumer, acks)
        except BrokerError as exc:
            if has_request:
                code, message = to_wire(exc)
                self._write(
                    commands.ack_response(
                        cmd.consumer_id, cmd.request_id, error=code, message=message
                    )
                )
            return
        if has_request:
            self._write(commands.ack_response(cmd.consumer_id, cmd.request_id))

    def _on_redeliver_unacknowledged_messages(self, frame: Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        state = self._consumers.get(cmd.consumer_id)
        if state is None:
            return
        positions = [_position(m) for m in cmd.message_ids] if cmd.message_ids else None
        state.subscription.redeliver(state.consumer, positions)

    def _on_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        request_id = cmd.request_id

        async def seek() -> None:
            state = self._consumer_state(cmd.consumer_id)
            topic, subscription = state.topic, state.subscription
            if cmd.HasField("message_publish_time"):
                target = topic.find_position_by_publish_time(cmd.message_publish_time)
            elif cmd.HasField("message_id"):
                target = topic.seek_target(MessageId.from_pb(cmd.message_id))
            else:
                raise MetadataError("Seek needs a message id or a publish time")
            # Java's order, which the client expects: disconnect, reset, then reply.
            subscription.disconnect_all()
            subscription.reset_to(target)
            self._write(commands.success(request_id))

        self._request(request_id, seek)

    def _on_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.getLastMessageId
        request_id = cmd.request_id
        try:
            state = self._consumer_state(cmd.consumer_id)
        except BrokerError as exc:
            self._reply_error(request_id, exc)
            return
        last, mark_delete = state.topic.last_message_id(state.subscription)
        self._write(commands.get_last_message_id_response(request_id, last, mark_delete))

    def _on_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        request_id = cmd.request_id

        async def unsubscribe() -> None:
            state = self._consumer_state(cmd.consumer_id)
            others = [c for c in state.subscription.consumers if c is not state.consumer]
            if others:
                raise ConsumerBusy("Unconnected or shared consumer attempting to unsubscribe")
            del self._consumers[cmd.consumer_id]
            state.subscription.remove_consumer(state.consumer, redeliver=False)
            state.topic.delete_subscription(state.subscription.name)
            self._write(commands.success(request_id))

        self._request(request_id, unsubscribe)

    def _on_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        state = self._consumers.pop(cmd.consumer_id, None)
        if state is not None:
            state.subscription.remove_consumer(state.consumer)
        self._write(commands.success(cmd.request_id))

    def _on_consumer_stats(self, frame: Frame) -> None:
        cmd = frame.command.consumerStats
        state = self._consumers.get(cmd.consumer_id)
        if state is None:
            self._write(
                commands.consumer_stats_response(
                    cmd.request_id,
                    error_code=ServerError.ConsumerNotFound,
                    error_message="Consumer not found",
                )
            )
            return
        consumer = state.consumer
        self._write(
            commands.consumer_stats_response(
                cmd.request_id,
                stats={
                    "consumerName": consumer.name,
                    "availablePermits": consumer.permits,
                    "unackedMessages": consumer.unacked_messages,
                    "msgBacklog": state.subscription.backlog(),
                    "type": state.subscription.sub_type.name
                    if state.subscription.sub_type is not None
                    else "",
                },
            )
        )

    # ConsumerSink ------------------------------------------------------------------------

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        entry: bytes,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        self._write(
            commands.message(
                consumer_id,
                MessageId(position.ledger_id, position.entry_id),
                entry,
                redelivery_count,
                ack_set,
            )
        )

    def is_writable(self) -> bool:
        """Back-pressure toward slow consumers: the transport's buffer is below its high-water
        mark (pause_writing/resume_writing) and so is what this turn queued but not written."""
        if not self._writable or self._closing:
            return False
        if self._out_bytes >= self._write_high_water:
            self._dispatch_deferred = True
            return False
        return True

    def close_consumer(self, consumer_id: int) -> None:
        # Forget the id first: the client re-subscribes with the same id after CLOSE_CONSUMER.
        self._consumers.pop(consumer_id, None)
        self._write(commands.close_consumer(consumer_id))

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self._write(commands.active_consumer_change(consumer_id, is_active))


class _CloseConnection(ProtocolError):
    """A protocol violation by the peer that ends this connection."""


def _handlers() -> dict[int, Callable[[ServerConnection, Frame], None]]:
    table: dict[int, Callable[[ServerConnection, Frame], None]] = {
        T.CONNECT: ServerConnection._on_connect,
        T.PING: ServerConnection._on_ping,
        T.PONG: ServerConnection._on_pong,
        T.PARTITIONED_METADATA: ServerConnection._on_partitioned_metadata,
        T.LOOKUP: ServerConnection._on_lookup,
        T.GET_TOPICS_OF_NAMESPACE: ServerConnection._on_get_topics_of_namespace,
        T.GET_SCHEMA: ServerConnection._on_get_schema,
        T.GET_OR_CREATE_SCHEMA: ServerConnection._on_get_or_create_schema,
        T.PRODUCER: ServerConnection._on_producer,
        T.SEND: ServerConnection._on_send,
        T.CLOSE_PRODUCER: ServerConnection._on_close_producer,
        T.SUBSCRIBE: ServerConnection._on_subscribe,
        T.FLOW: ServerConnection._on_flow,
        T.ACK: ServerConnection._on_ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: (
            ServerConnection._on_redeliver_unacknowledged_messages
        ),
        T.SEEK: ServerConnection._on_seek,
        T.GET_LAST_MESSAGE_ID: ServerConnection._on_get_last_message_id,
        T.UNSUBSCRIBE: ServerConnection._on_unsubscribe,
        T.CLOSE_CONSUMER: ServerConnection._on_close_consumer,
        T.CONSUMER_STATS: ServerConnection._on_consumer_stats,
    }
    return table


_HANDLERS = _handlers()

__all__ = ["SERVER_VERSION", "ServerConnection"]
