"""One client connection: the only broker module that reads and writes sockets.

Rules (h11/h2 style, see aesthetics §2):

1. Bytes go into a sans-I/O ``FrameDecoder``; complete frames come out and are dispatched through
   a table to one ``on_<command>`` handler each: connection-level commands here, producer
   commands in ``ProducerEndpoint`` (``connection_producers.py``) and consumer commands in
   ``ConsumerEndpoint`` (``connection_consumers.py``), which write only through this class. A
   malformed frame, a command before CONNECT or a command we do not serve closes **this**
   connection only, with a rate-limited log line that never contains the payload.
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
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from broker.auth.handshake import ConnectionAuth
from broker.connection.consumers import ConsumerEndpoint
from broker.connection.producers import ProducerEndpoint
from broker.errors import (
    BrokerError,
    InvalidTopicName,
    ServiceNotReady,
    to_wire,
)
from broker.logging_setup import RateLimitedLog
from broker.topics.non_persistent import non_persistent_topics_of
from protocol import commands, pb
from protocol.enums import TopicListMode
from protocol.errors import ProtocolError, ServerError
from protocol.framing import SUB_MESSAGE_NAME, Frame, FrameDecoder
from protocol.topic_name import NON_PERSISTENT, InvalidTopicNameError, NamespaceName, TopicName

if TYPE_CHECKING:
    from broker.auth.authorization import Authorizer
    from broker.service import BrokerService

log = logging.getLogger(__name__)
_bad_input_log = RateLimitedLog(log, limit=5, interval=60.0)
_refusal_log = RateLimitedLog(log, limit=5, interval=60.0)

SERVER_VERSION = "Magnetar 0.1.0 (Pulsar 4.0 protocol)"
MAX_PROTOCOL_VERSION = 20
T = pb.BaseCommand.Type


def _command_name(kind: int) -> str:
    return SUB_MESSAGE_NAME.get(kind, str(kind)).upper()


class ServerConnection(asyncio.Protocol):
    """asyncio Protocol for one Pulsar client connection."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._config = service.config
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(max_frame_size=self._config.frame_limit)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._peer_ip: str | None = None
        self._connected = False
        self._closing = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._write_high_water = self._config.connection_write_buffer_high_water_mark_bytes
        self._dispatch_deferred = False
        self._flush_scheduled = False
        self._writable = True
        self.reading_paused = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._frame_seen = True
        self._alive_waiters: list[asyncio.Future[None]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._closed = asyncio.Event()
        self.client_version = ""
        self.created_at = time.time()
        self.producers = ProducerEndpoint(self)
        self.consumers = ConsumerEndpoint(self)
        self.auth = ConnectionAuth(self)  # the role; CONNECT authentication and its refresh
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: self._on_pong,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            T.GET_SCHEMA: self._on_get_schema,
            T.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
            **self.producers.handlers(),
            **self.consumers.handlers(),
            **self.auth.handlers(),
        }

    # ------------------------------------------------------------------ shared with endpoints

    @property
    def service(self) -> BrokerService:
        return self._service

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._transport

    @property
    def authorizer(self) -> Authorizer:
        return self._service.security.authorizer

    @property
    def role(self) -> str | None:
        return self.auth.role

    def refuse_after(self, delay: float, frame: bytes) -> None:
        """Stop reading, then after ``delay`` seconds write ``frame`` and close (a failed
        authentication: its answer is delayed so that guessing credentials costs time)."""
        self.pause_reading()

        def refuse() -> None:
            self.write(frame)
            self.close()

        self._timers.append(self._loop.call_later(delay, refuse))

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both offer this interface.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._peer_ip = str(peer[0]) if isinstance(peer, tuple) else None
        self._transport.set_write_buffer_limits(
            high=self._config.connection_write_buffer_high_water_mark_bytes,
            low=self._config.connection_write_buffer_low_water_mark_bytes,
        )
        self._service.connections.add(self)
        # Counted before the check and released in connection_lost, refused or not (Pulsar).
        refusal = self._service.connection_limiter.admit(self._peer_ip)
        if refusal is not None:
            _refusal_log.log(
                logging.INFO, self._peer_ip, "refusing connection from %s: %s", self._peer, refusal
            )
            self.write(commands.error(-1, ServerError.NotAllowedError, refusal))
            self.close()
            return
        self._timers.append(
            self._loop.call_later(
                self._config.connection_handshake_timeout_seconds, self._handshake_deadline
            )
        )
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        decoded = False
        try:
            self._decoder.feed(data)
            for frame in self._decoder:
                # Liveness is a whole frame, as in Java (PulsarHandler.messageReceived): a peer
                # dribbling the bytes of a frame it never finishes is not alive (slowloris).
                decoded = self._frame_seen = True
                self._dispatch(frame)
                if self._closing:
                    return
        except ProtocolError as exc:
            self._close_for_bad_input(str(exc))
        if decoded:
            self._wake_alive_waiters()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._closed.set()
        self._service.connections.discard(self)
        self._service.connection_limiter.release(self._peer_ip)
        for timer in self._timers:
            timer.cancel()
        self.auth.connection_lost()
        for waiter in self._alive_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionError("connection closed"))
        self._alive_waiters.clear()
        self.consumers.connection_lost()
        # Cancel this connection's own work first: cancelling after spawning the removals would
        # cancel them before they ever ran, leaving a dead exclusive holder on its topic.
        for task in self._tasks:
            task.cancel()
        self.producers.connection_lost()

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self.consumers.reschedule_dispatch()

    # ------------------------------------------------------------------ output

    def write(self, frame: bytes) -> None:
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
            self.consumers.reschedule_dispatch()

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
            self.write(commands.ping())
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
        self.write(commands.ping())
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
        handler = self._handlers.get(kind)
        if handler is None:
            raise _CloseConnection(f"unsupported command {_command_name(kind)}")
        handler(frame)

    def spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection %s task failed", self._peer, exc_info=task.exception())

    def reply_error(self, request_id: int, exc: BaseException) -> None:
        code, message = to_wire(exc)
        self.write(commands.error(request_id, code, message))

    def request(self, request_id: int, work: Callable[[], Awaitable[None]]) -> None:
        """Run an async request handler; any BrokerError becomes ERROR{request_id}."""

        async def run() -> None:
            try:
                await work()
            except BrokerError as exc:
                self.reply_error(request_id, exc)
            except Exception as exc:
                log.exception("request %d on %s failed", request_id, self._peer)
                self.reply_error(request_id, exc)

        self.spawn(run())

    # ------------------------------------------------------------------ handshake / liveness

    def _on_connect(self, frame: Frame) -> None:
        if self._connected:
            raise _CloseConnection("second CONNECT")
        cmd = frame.command.connect
        self.client_version = cmd.client_version
        version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
        if not self.auth.on_connect(cmd, SERVER_VERSION, version):
            return  # refused: ERROR AuthenticationError follows after a delay
        self._connected = True
        self.write(
            commands.connected(
                SERVER_VERSION,
                protocol_version=version,
                max_message_size=self._config.max_message_size,
            )
        )

    def _on_ping(self, frame: Frame) -> None:
        self.write(commands.pong())

    def _on_pong(self, frame: Frame) -> None:
        pass  # any frame counts as liveness (data_received)

    # ------------------------------------------------------------------ lookup

    def parse_topic(self, name: str) -> TopicName:
        try:
            # non-persistent:// too: BrokerService.get_topic serves those from memory.
            return TopicName.parse(name, allow_non_persistent=True)
        except InvalidTopicNameError as exc:
            raise InvalidTopicName(str(exc)) from exc

    def _on_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitionMetadata
        request_id = cmd.request_id
        try:
            topic = self.parse_topic(cmd.topic)
            self.authorizer.check_lookup(self.auth.role, topic)
            partitions = self._service.partitions_of(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self.write(
                commands.partitioned_metadata_response(request_id, error=code, message=message)
            )
            return
        self.write(commands.partitioned_metadata_response(request_id, partitions))

    def _on_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookupTopic
        request_id = cmd.request_id
        listener = cmd.advertised_listener_name
        if listener:
            self.write(
                commands.lookup_response(
                    request_id,
                    error=ServerError.ServiceNotReady,
                    message=f"the broker do not have {listener} listener",
                )
            )
            return
        try:
            topic = self.parse_topic(cmd.topic)
            self.authorizer.check_lookup(self.auth.role, topic)
            self._service.check_namespace(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self.write(commands.lookup_response(request_id, error=code, message=message))
            return
        if self._service.damaged.get(topic.full_name) is not None:
            # Known damage answers the lookup (checking that the files did not change since
            # reads file metadata, so off the loop); unknown damage is found by the load that
            # PRODUCER/SUBSCRIBE triggers, as Pulsar's lookup does not load the topic either.
            self.spawn(self._lookup_damaged(request_id, topic))
            return
        if self._service.cluster is not None and topic.domain != NON_PERSISTENT:
            self.spawn(self._lookup_in_cluster(request_id, topic, cmd.authoritative))
            return
        self._lookup_found(request_id)

    async def _lookup_in_cluster(self, request_id: int, topic: TopicName, authority: bool) -> None:
        """Cluster mode: Connect to the bundle's owner, or Redirect to the candidate broker,
        as Pulsar's ``TopicLookupBase`` answers (broker/cluster/service.py)."""
        cluster = self._service.cluster
        assert cluster is not None
        try:
            answer = await cluster.lookup(topic, authority)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.warning("lookup %d on %s failed: %s", request_id, self._peer, exc)
                exc = ServiceNotReady(f"lookup of {topic.full_name} failed: {exc}")
            code, message = to_wire(exc)
            self.write(commands.lookup_response(request_id, error=code, message=message))
            return
        self.write(
            commands.lookup_response(
                request_id,
                answer.broker.service_url or None,
                broker_service_url_tls=answer.broker.service_url_tls or None,
                redirect=answer.redirect,
                authoritative=answer.authoritative,
            )
        )

    async def _lookup_damaged(self, request_id: int, topic: TopicName) -> None:
        try:
            await self._service.refuse_if_damaged(topic)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.exception("lookup %d on %s failed", request_id, self._peer)
            code, message = to_wire(exc)
            self.write(commands.lookup_response(request_id, error=code, message=message))
            return
        self._lookup_found(request_id)

    def _lookup_found(self, request_id: int) -> None:
        # "Connect to me", through the client's own service URL: the client keeps one socket.
        self.write(
            commands.lookup_response(
                request_id,
                self._service.service_url or None,
                broker_service_url_tls=self._service.service_url_tls or None,
                authoritative=True,
                proxy_through_service_url=True,
            )
        )

    def _on_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        try:
            namespace = NamespaceName.parse(cmd.namespace)
        except InvalidTopicNameError as exc:
            self.reply_error(cmd.request_id, InvalidTopicName(str(exc)))
            return
        try:
            self.authorizer.check_list_topics(self.auth.role, namespace)
        except BrokerError as exc:
            self.reply_error(cmd.request_id, exc)
            return
        topics = self._service.topics_of_namespace(namespace)
        if int(cmd.mode) != TopicListMode.PERSISTENT:
            # NON_PERSISTENT / ALL (RegexSubscriptionMode): the loaded in-memory topics too.
            in_memory = non_persistent_topics_of(self._service.topics, namespace)
            persistent = int(cmd.mode) == TopicListMode.ALL
            topics = (topics if persistent else []) + in_memory
        self.write(commands.get_topics_of_namespace_response(cmd.request_id, topics))

    # ------------------------------------------------------------------ schema
    # Kept under the topic's full name (as PRODUCER stores them): every spelling of a topic
    # shares one schema, and a name that does not parse gets an error response.

    def _on_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.getSchema
        version = cmd.schema_version if cmd.HasField("schema_version") else None
        try:
            topic = self.parse_topic(cmd.topic)
            self.authorizer.check_lookup(self.auth.role, topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self.write(
                commands.get_schema_response(cmd.request_id, error_code=code, error_message=message)
            )
            return
        found = self._service.schemas.get(topic.full_name, version)
        if found is None:
            self.write(
                commands.get_schema_response(
                    cmd.request_id,
                    error_code=ServerError.TopicNotFound,
                    error_message=f"Topic not found or no-schema {topic.full_name}",
                )
            )
            return
        schema_bytes, schema_version = found
        schema = pb.Schema()
        schema.ParseFromString(schema_bytes)
        self.write(
            commands.get_schema_response(
                cmd.request_id, schema=schema, schema_version=schema_version
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.getOrCreateSchema
        try:
            topic = self.parse_topic(cmd.topic)
            self.authorizer.check_produce(self.auth.role, topic)
            self._service.check_namespace(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self.write(
                commands.get_or_create_schema_response(
                    cmd.request_id, error_code=code, error_message=message
                )
            )
            return
        schema = cmd.schema.SerializeToString()

        async def store() -> None:  # durable before the answer, written off the event loop
            version = await self._service.schemas.put(topic.full_name, schema)
            self.write(
                commands.get_or_create_schema_response(cmd.request_id, schema_version=version)
            )

        self.request(cmd.request_id, store)

    # ------------------------------------------------------------------ producers

    # ProducerSink -------------------------------------------------------------------

    # SEND -------------------------------------------------------------------------------

    def pause_reading(self) -> None:
        if not self.reading_paused and self._transport is not None:
            self.reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self._transport is not None and not self._closing:
            self.reading_paused = False
            self._transport.resume_reading()

    # ------------------------------------------------------------------ consumers

    # ConsumerSink ------------------------------------------------------------------------

    def is_writable(self) -> bool:
        """Back-pressure toward slow consumers: the transport's buffer is below its high-water
        mark (pause_writing/resume_writing) and so is what this turn queued but not written."""
        if not self._writable or self._closing:
            return False
        if self._out_bytes >= self._write_high_water:
            self._dispatch_deferred = True
            return False
        return True


class _CloseConnection(ProtocolError):
    """A protocol violation by the peer that ends this connection."""


__all__ = ["SERVER_VERSION", "ServerConnection"]
