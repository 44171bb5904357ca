"""One TCP connection to a broker: a thin asyncio shell around ``protocol``'s codec.

The connection is an ``asyncio.Protocol`` (asyncpg's split: the codec is sans-I/O, this class
owns the transport), so it needs no reader task: bytes arrive in ``data_received``, go through
``FrameDecoder`` and every frame is dispatched at once. What it does:

* **Handshake.** CONNECT (protocol version 20) and CONNECTED, within ``connection_timeout``;
  the broker's ``protocol_version`` and ``max_message_size`` are kept. Before CONNECTED any
  other frame ends the connection, as in the official client.
* **Requests** (aiokafka ``conn.py``'s model, keyed by id because Pulsar answers out of order):
  ``request(build)`` picks a request id, writes ``build(request_id)`` and waits for the answer
  with that id, within the operation timeout. Failures in the answer (ERROR, a Failed lookup,
  an ``error_code``) are raised through ``errors.from_server_error``. A WaitForExclusive
  producer's first PRODUCER_SUCCESS (``producer_ready=false``) stops the clock and the request
  waits, without limit, for the second.
* **Routing** of producer- and consumer-scoped frames (SEND_RECEIPT, SEND_ERROR,
  CLOSE_PRODUCER, MESSAGE, CLOSE_CONSUMER, ...) to the handler registered for the id. A
  CLOSE_PRODUCER/CLOSE_CONSUMER from the broker unregisters the handler before telling it.
* **Keep-alive** both ways: a PING from the broker is answered with PONG; every
  ``keep_alive_interval`` we send PING, and a connection that brought no frame at all during
  a whole interval is closed as dead.
* **Write coalescing**: frames written in one turn of the event loop leave in one socket write.
* **Loss**: however the connection ends, pending requests fail with ``Disconnected`` (which
  callers retry), every registered handler gets ``on_connection_lost`` and close listeners
  run, exactly once. ``close()`` returns when the transport is gone; nothing is left behind
  (no task is created here but one answering an AUTH_CHALLENGE).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

from client.config import CLIENT_VERSION, ClientConfig
from client.errors import (
    AuthenticationError,
    ConnectError,
    Disconnected,
    PulsarException,
    Timeout,
    from_server_error,
)
from client.service_url import Address
from protocol import Frame, FrameDecoder, RemoteProtocolError, commands, pb
from protocol.framing import SUB_MESSAGE_NAME

__all__ = ["Connection", "ConsumerHandler", "ProducerHandler"]

logger = logging.getLogger(__name__)

T = pb.BaseCommand
_MESSAGE = T.MESSAGE
#: Largest frame accepted from a broker. The broker decides message sizes (CONNECTED tells us
#: its limit); this bound only stops a runaway peer from making us buffer without end.
MAX_INCOMING_FRAME = 128 * 1024 * 1024

_RESPONSE_TYPES = frozenset(
    {
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.LOOKUP_RESPONSE,
        T.PARTITIONED_METADATA_RESPONSE,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
        T.ACK_RESPONSE,
    }
)


class ProducerHandler(Protocol):
    """What a connection calls on a producer registered with it."""

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...

    def on_send_error(self, error: pb.CommandSendError) -> None: ...

    def on_closed_by_broker(self, connection: Connection) -> None: ...

    def on_connection_lost(self, connection: Connection) -> None: ...


class ConsumerHandler(Protocol):
    """What a connection calls on a consumer registered with it."""

    def on_message(self, frame: Frame) -> None: ...

    def on_active_consumer_change(self, is_active: bool) -> None: ...

    def on_reached_end_of_topic(self) -> None: ...

    def on_closed_by_broker(self, connection: Connection) -> None: ...

    def on_connection_lost(self, connection: Connection) -> None: ...


class _Request:
    __slots__ = ("future", "on_waiting", "timer")

    def __init__(
        self,
        future: asyncio.Future[pb.BaseCommand],
        timer: asyncio.TimerHandle | None,
        on_waiting: Callable[[], None] | None,
    ) -> None:
        self.future = future
        self.timer = timer
        self.on_waiting = on_waiting

    def stop_clock(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Connection(asyncio.Protocol):
    """A connection to the broker at ``physical`` (speaking for ``logical`` when proxied)."""

    def __init__(self, logical: Address, physical: Address, config: ClientConfig) -> None:
        self.logical = logical
        self.physical = physical
        #: The service URL of the cluster it belongs to (``ConnectionPool.switch``): ids and
        #: acknowledgements of one cluster name unrelated entries on another.
        self.cluster = ""
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(MAX_INCOMING_FRAME)
        self._handshake: asyncio.Future[None] = self._loop.create_future()
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self._ready = False
        self._closing = False  # abort() or close() called: no more frames in or out
        self._closed = False  # the transport is gone (connection_lost ran)
        self._requests: dict[int, _Request] = {}
        self._next_request_id = 0
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._close_listeners: list[Callable[[Connection], None]] = []
        self._challenge_answers: set[asyncio.Task[None]] = set()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._heard_from_broker = False
        self.server_version = ""
        self.protocol_version = 0
        self.max_message_size = commands.DEFAULT_MAX_MESSAGE_SIZE
        self.close_reason: PulsarException | None = None
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.CONNECTED: self._on_connected,
            T.PING: self._on_ping,
            T.PONG: _ignore,
            T.SEND_RECEIPT: self._on_send_receipt,
            T.SEND_ERROR: self._on_send_error,
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.ACTIVE_CONSUMER_CHANGE: self._on_active_consumer_change,
            T.REACHED_END_OF_TOPIC: self._on_reached_end_of_topic,
            T.TOPIC_MIGRATED: self._on_topic_migrated,
            T.AUTH_CHALLENGE: self._on_auth_challenge,
        }
        for response_type in _RESPONSE_TYPES:
            self._handlers[response_type] = self._on_response

    # --- opening ------------------------------------------------------------------------

    @classmethod
    async def open(cls, logical: Address, physical: Address, config: ClientConfig) -> Connection:
        """Connect and complete the handshake within ``config.connection_timeout``.

        Raises:
            Disconnected: the broker cannot be reached or closed the connection (retriable).
            PulsarException: the broker refused the CONNECT.
        """
        connection = cls(logical, physical, config)
        try:
            async with asyncio.timeout(config.connection_timeout):
                if config.authentication is not None:
                    await config.authentication.prepare()  # an OAuth2 token, fetched if stale
                tls = config.ssl_context
                await connection._loop.create_connection(
                    lambda: connection,
                    physical.host,
                    physical.port,
                    ssl=tls,
                    server_hostname=physical.host if tls is not None else None,
                )
                await connection._handshake
        except TimeoutError:
            reason = Disconnected(f"no handshake with {physical} in time")
            connection._give_up(reason)
            raise reason from None
        except OSError as exc:
            reason = Disconnected(f"cannot connect to {physical}: {exc}")
            connection._give_up(reason)
            raise reason from exc
        except BaseException:
            connection._give_up(Disconnected(f"connecting to {physical} was abandoned"))
            raise
        return connection

    def _give_up(self, reason: PulsarException) -> None:
        self._handshake.cancel()  # nobody will await it any more
        self.abort(reason)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without inheriting from it.
        self._transport = cast(asyncio.Transport, transport)
        proxied = self.logical != self.physical
        auth = self._config.authentication
        self.write(
            commands.connect(
                CLIENT_VERSION,
                auth_method_name=auth.method_name if auth is not None else "none",
                auth_data=auth.auth_data() if auth is not None else None,
                proxy_to_broker_url=self.logical.host_port if proxied else None,
                supports_auth_refresh=True,
                supports_broker_entry_metadata=True,
            )
        )

    def _on_auth_challenge(self, frame: Frame) -> None:
        """The broker wants fresh credentials (an expired token): ask the authentication
        (a token supplier is called again, an OAuth2 token fetched) and answer on the same
        connection. Renewing may need the network, so a task answers; it is kept until done."""
        task = self._loop.create_task(self._answer_challenge(frame.command.authChallenge))
        self._challenge_answers.add(task)
        task.add_done_callback(self._challenge_answers.discard)

    async def _answer_challenge(self, challenge: pb.CommandAuthChallenge) -> None:
        auth = self._config.authentication
        method, data = challenge.challenge.auth_method_name, b""
        if auth is not None:
            try:
                await auth.prepare(renew=True)
                method, data = auth.method_name, auth.auth_data()
            except Exception as exc:  # the broker would close us anyway: say why
                reason = exc if isinstance(exc, PulsarException) else AuthenticationError(str(exc))
                self.abort(reason)
                return
        version = self.protocol_version or commands.PROTOCOL_VERSION
        self.write(commands.auth_response(CLIENT_VERSION, method, data, protocol_version=version))

    def _on_connected(self, frame: Frame) -> None:
        if self._ready:
            raise RemoteProtocolError("a second CONNECTED")
        connected = frame.command.connected
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            self.max_message_size = connected.max_message_size
        self._ready = True
        if self.protocol_version >= 1:
            self._keepalive = self._loop.call_later(
                self._config.keep_alive_interval, self._keepalive_tick
            )
        if not self._handshake.done():
            self._handshake.set_result(None)

    @property
    def is_ready(self) -> bool:
        """Handshake done and not closed: requests and writes go out."""
        return self._ready and not self._closing

    # --- requests -----------------------------------------------------------------------

    async def request(
        self,
        build: Callable[[int], bytes],
        *,
        time_limit: float | None = None,
        on_waiting: Callable[[], None] | None = None,
    ) -> pb.BaseCommand:
        """Send ``build(request_id)`` and return the broker's answer to it.

        Args:
            build: makes the request frame for the request id chosen here.
            time_limit: seconds to wait for the answer (default: the operation timeout).
            on_waiting: called when the broker says it queued the request (a WaitForExclusive
                producer); the wait then has no time limit.

        Raises:
            Timeout: no answer in time.
            Disconnected: the connection is closed or closes before the answer.
            PulsarException: the broker answered with an error.
        """
        if not self.is_ready:
            raise self._not_ready()
        request_id = self._new_request_id()
        future: asyncio.Future[pb.BaseCommand] = self._loop.create_future()
        seconds = self._config.operation_timeout if time_limit is None else time_limit
        timer = self._loop.call_later(seconds, self._expire, request_id, seconds)
        request = _Request(future, timer, on_waiting)
        self._requests[request_id] = request
        try:
            self.write(build(request_id))
            return await future
        finally:
            request.stop_clock()
            if self._requests.get(request_id) is request:
                del self._requests[request_id]

    def send_request_nowait(self, build: Callable[[int], bytes]) -> None:
        """Send a request whose answer nobody waits for (e.g. a precautionary close)."""
        if self.is_ready:
            self.write(build(self._new_request_id()))

    def _new_request_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        return request_id

    def _expire(self, request_id: int, seconds: float) -> None:
        request = self._requests.pop(request_id, None)
        if request is not None and not request.future.done():
            request.future.set_exception(
                Timeout(f"no answer from {self.physical} within {seconds:g} s")
            )

    def _on_response(self, frame: Frame) -> None:
        name = SUB_MESSAGE_NAME[frame.type]
        answer = getattr(frame.command, name)
        request = self._requests.get(answer.request_id)
        if request is None:
            logger.debug("%s: answer to unknown request %d", self.physical, answer.request_id)
            return
        if frame.type == T.PRODUCER_SUCCESS and not answer.producer_ready:
            request.stop_clock()
            if request.on_waiting is not None:
                request.on_waiting()
            return
        del self._requests[answer.request_id]
        if request.future.done():
            return
        error = _error_in(frame.type, answer)
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(frame.command)

    # --- producer and consumer frames ---------------------------------------------------

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._producers[producer_id] = handler

    def remove_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        if self._producers.get(producer_id) is handler:
            del self._producers[producer_id]

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._consumers[consumer_id] = handler

    def remove_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        if self._consumers.get(consumer_id) is handler:
            del self._consumers[consumer_id]

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        self._close_listeners.append(listener)

    def _on_send_receipt(self, frame: Frame) -> None:
        receipt = frame.command.send_receipt
        handler = self._producers.get(receipt.producer_id)
        if handler is not None:
            handler.on_send_receipt(receipt)

    def _on_send_error(self, frame: Frame) -> None:
        error = frame.command.send_error
        handler = self._producers.get(error.producer_id)
        if handler is not None:
            handler.on_send_error(error)

    def _on_close_producer(self, frame: Frame) -> None:
        handler = self._producers.pop(frame.command.close_producer.producer_id, None)
        if handler is not None:
            handler.on_closed_by_broker(self)

    def _on_close_consumer(self, frame: Frame) -> None:
        handler = self._consumers.pop(frame.command.close_consumer.consumer_id, None)
        if handler is not None:
            handler.on_closed_by_broker(self)

    def _on_active_consumer_change(self, frame: Frame) -> None:
        change = frame.command.active_consumer_change
        handler = self._consumers.get(change.consumer_id)
        if handler is not None:
            handler.on_active_consumer_change(change.is_active)

    def _on_reached_end_of_topic(self, frame: Frame) -> None:
        handler = self._consumers.get(frame.command.reachedEndOfTopic.consumer_id)
        if handler is not None:
            handler.on_reached_end_of_topic()

    def _on_topic_migrated(self, frame: Frame) -> None:
        # Blue-green migration: behave as for a broker-side close; the lookup finds the new home.
        migrated = frame.command.topicMigrated
        handlers: dict[int, ProducerHandler] | dict[int, ConsumerHandler]
        if migrated.resource_type == pb.CommandTopicMigrated.Producer:
            handlers = self._producers
        else:
            handlers = self._consumers
        handler = handlers.pop(migrated.resource_id, None)
        if handler is not None:
            handler.on_closed_by_broker(self)

    # --- reading ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._heard_from_broker = True
        decoder = self._decoder
        try:
            decoder.feed(data)
            consumers = self._consumers
            for frame in decoder:
                if self._closing:
                    break
                if frame.type == _MESSAGE and self._ready:  # most frames: to their consumer
                    consumer = consumers.get(frame.command.message.consumer_id)
                    if consumer is not None:
                        consumer.on_message(frame)
                    continue
                if not self._ready and frame.type not in (T.CONNECTED, T.ERROR, T.AUTH_CHALLENGE):
                    raise RemoteProtocolError(f"{_type_name(frame.type)} before CONNECTED")
                handler = self._handlers.get(frame.type)
                if handler is None:
                    logger.debug("%s: ignoring %s", self.physical, _type_name(frame.type))
                elif frame.type == T.ERROR and not self._ready:
                    self._refused(frame.command.error)
                else:
                    handler(frame)
        except RemoteProtocolError as exc:
            logger.warning("%s: protocol error, closing: %s", self.physical, exc)
            self.abort(Disconnected(f"{self.physical} sent bad bytes: {exc}"))
        except Exception as exc:  # a handler's bug must not leave the connection half-dead
            logger.exception("%s: error handling a frame, closing", self.physical)
            self.abort(Disconnected(f"error handling a frame from {self.physical}: {exc!r}"))

    def _refused(self, error: pb.CommandError) -> None:
        reason = from_server_error(error.error, error.message)
        if not self._handshake.done():
            self._handshake.set_exception(reason)
        self.abort(reason)

    def _on_ping(self, _frame: Frame) -> None:
        self.write(commands.pong())

    def _keepalive_tick(self) -> None:
        self._keepalive = None
        if not self.is_ready:
            return
        if not self._heard_from_broker:
            interval = self._config.keep_alive_interval
            self.abort(Disconnected(f"nothing from {self.physical} for {interval:g} s"))
            return
        self._heard_from_broker = False
        self.write(commands.ping())
        self._keepalive = self._loop.call_later(
            self._config.keep_alive_interval, self._keepalive_tick
        )

    # --- writing ------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue a frame; frames queued in one loop turn go out in one socket write.

        Writing to a closed connection is a no-op: whatever needed the frame learns of the
        loss through ``on_connection_lost`` or a failed request and sends it again elsewhere.
        """
        if self._closing:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        transport = self._transport
        if out and transport is not None and not self._closing:
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    # --- closing ------------------------------------------------------------------------

    def abort(self, reason: PulsarException) -> None:
        """Drop the connection at once (unsent frames are discarded)."""
        if self.close_reason is None:
            self.close_reason = reason
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        else:
            self._connection_ended()

    async def close(self) -> None:
        """Send what is queued, close the socket and wait until the transport is gone."""
        if self.close_reason is None:
            self.close_reason = Disconnected(f"connection to {self.physical} closed by the client")
        transport = self._transport
        if transport is None:
            self._connection_ended()
            return
        if not self._closing:
            self._flush()
            self._closing = True
            transport.close()
        await asyncio.shield(self._lost)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_ended(exc)

    def _connection_ended(self, exc: Exception | None = None) -> None:
        if self._closed:
            return
        self._closed = self._closing = True
        if self.close_reason is None:
            detail = f": {exc}" if exc else ""
            self.close_reason = Disconnected(f"connection to {self.physical} lost{detail}")
        reason = self.close_reason
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self._out.clear()
        if not self._handshake.done():
            self._handshake.set_exception(reason)
        requests, self._requests = self._requests, {}
        for request in requests.values():
            request.stop_clock()
            if not request.future.done():
                request.future.set_exception(reason)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer.on_connection_lost(self)
        for consumer in consumers.values():
            consumer.on_connection_lost(self)
        listeners, self._close_listeners = self._close_listeners, []
        for listener in listeners:
            listener(self)
        if not self._lost.done():
            self._lost.set_result(None)

    def _not_ready(self) -> PulsarException:
        if self.close_reason is not None:
            return type(self.close_reason)(str(self.close_reason))
        return ConnectError(f"connection to {self.physical} is not ready")

    def __repr__(self) -> str:
        state = "closed" if self._closing else "ready" if self._ready else "connecting"
        return f"<Connection {self.physical} ({state})>"


def _ignore(_frame: Frame) -> None:
    pass


def _type_name(frame_type: int) -> str:
    return SUB_MESSAGE_NAME.get(frame_type, str(frame_type))


def _error_in(frame_type: int, answer: object) -> PulsarException | None:
    """The failure an answer carries, if any (each answer type says it its own way)."""
    if frame_type == T.ERROR:
        error: pb.CommandError = answer  # type: ignore[assignment]
        return from_server_error(error.error, error.message)
    if frame_type == T.LOOKUP_RESPONSE:
        lookup: pb.CommandLookupTopicResponse = answer  # type: ignore[assignment]
        if lookup.response != pb.CommandLookupTopicResponse.Failed:
            return None
        return _failure(lookup.HasField("error"), lookup.error, lookup.message)
    if frame_type == T.PARTITIONED_METADATA_RESPONSE:
        metadata: pb.CommandPartitionedTopicMetadataResponse = answer  # type: ignore[assignment]
        if metadata.HasField("response") and metadata.response == metadata.Success:
            return None
        return _failure(metadata.HasField("error"), metadata.error, metadata.message)
    if frame_type in (
        T.GET_SCHEMA_RESPONSE,
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
    ):
        if not answer.HasField("error_code"):  # type: ignore[attr-defined]
            return None
        return from_server_error(answer.error_code, answer.error_message)  # type: ignore[attr-defined]
    if frame_type == T.ACK_RESPONSE:
        ack: pb.CommandAckResponse = answer  # type: ignore[assignment]
        return from_server_error(ack.error, ack.message) if ack.HasField("error") else None
    return None


def _failure(has_error: bool, code: int, message: str) -> PulsarException:
    # A failed lookup without an error code: the C++ client reports ConnectError.
    if not has_error:
        return ConnectError(message or "lookup failed without an error code")
    return from_server_error(code, message)
