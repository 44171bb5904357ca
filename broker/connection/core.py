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
4. One turn of the loop decodes at most ``FRAMES_PER_TURN`` frames, ``REQUESTS_PER_TURN`` requests
   or ``DECODE_SECONDS_PER_TURN`` of work (issue #24): a 256 KiB read of small SENDs is ~1600
   frames, ~16 ms of handlers, and every other connection, timer and HTTP request would wait for
   all of them. Past the budget the connection stops reading and decodes the rest of what it
   holds in the next turn, in order; reading resumes once nothing is left over
   (``_continue_decoding``).
5. Domain errors (``BrokerError``) become ERROR / SEND_ERROR frames in exactly one place
   (``broker.errors.to_wire``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from broker.auth.handshake import ConnectionAuth, ConnectOutcome
from broker.connection.consumers import ConsumerEndpoint
from broker.connection.discovery import DiscoveryEndpoint
from broker.connection.producers import ProducerEndpoint
from broker.errors import (
    BrokerError,
    InvalidTopicName,
    to_wire,
)
from broker.logging_setup import RateLimitedLog
from protocol import commands, pb
from protocol.errors import ProtocolError, ServerError
from protocol.framing import SUB_MESSAGE_NAME, Frame, FrameDecoder
from protocol.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from broker.auth.authorization import Authorizer
    from broker.service import BrokerService

log = logging.getLogger(__name__)
_bad_input_log = RateLimitedLog(log, limit=5, interval=60.0)
_refusal_log = RateLimitedLog(log, limit=5, interval=60.0)

SERVER_VERSION = "Magnetar 0.1.0 (Pulsar 4.0 protocol)"
MAX_PROTOCOL_VERSION = 20
#: The decode budget of one connection in one turn of the loop (rule 4): enough frames that a
#: pipelining producer pays the pause/resume of its socket rarely (~2.5 ms of SENDs), few
#: enough that its handlers (and the tasks they start, which run in the next turn) stay short.
FRAMES_PER_TURN = 256
DECODE_SECONDS_PER_TURN = 0.002
#: Requests (PRODUCER, SUBSCRIBE, LOOKUP, ...) started per turn: each is a task whose first
#: step runs in the next turn, ~50-150 us each, so 256 of them would make that turn long.
REQUESTS_PER_TURN = 32
#: Bytes one connection reads in a turn before it pauses reading until the next one (128 KiB:
#: P5 tailing 0.92-0.95 with 256, 1.01-1.03 with 128, batched ingest unchanged). uvloop
#: reads a ready socket up to 32 times in a row (256 KiB each), each read decoded within the
#: budget above: a producer of batches took 5-10 ms of a turn while a consumer's FLOW waited
#: behind it, so a tailing consumer fell behind ingest (P5 of issue #26).
READ_BYTES_PER_TURN = 128 * 1024
T = pb.BaseCommand.Type


def _command_name(kind: int) -> str:
    return SUB_MESSAGE_NAME.get(kind, str(kind)).upper()


#: Bytes read into a thread's inbox at most (uvloop's own read buffer is as large).
INBOX_BYTES = 256 * 1024
_inboxes = threading.local()


def _inbox() -> memoryview:
    """This thread's read buffer, shared by its connections: a read is decoded (copied out)
    before the loop reads again, and brokers in other threads have their own."""
    inbox: memoryview | None = getattr(_inboxes, "view", None)
    if inbox is None:
        inbox = _inboxes.view = memoryview(bytearray(INBOX_BYTES))
    return inbox


class ServerConnection(asyncio.BufferedProtocol):
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
        self._connecting = False  # a CONNECT's check runs on the pool: frames wait
        self._refused = False  # CONNECT refused: nothing more is read or decoded
        self._protocol_version = 0
        self._closing = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._write_high_water = self._config.connection_write_buffer_high_water_mark_bytes
        self._dispatch_deferred = False
        self._flush_scheduled = False
        self._writable = True
        # Reading is paused for two independent reasons: one asked for through pause_reading
        # (publish back-pressure, a CONNECT being checked or refused) and the decode budget
        # (frames left over for the next turn). The socket reads only when neither holds.
        self.reading_paused = False
        self._backlog: asyncio.Handle | None = None  # the next turn's decode, when scheduled
        self._read_this_turn = 0  # bytes read in this turn of the loop (``READ_BYTES_PER_TURN``)
        self._reading_entry = False  # the last get_buffer gave the decoder's entry window
        self._unfinished: Callable[[], bool] | None = None  # a frame handled over many turns
        self._spawned = 0  # tasks started by the frames of this turn
        self._socket_paused = False
        #: Frames decoded so far (a counter for tests and stats: cheap, never reset).
        self.frames_received = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._frame_seen = True
        self._alive_waiters: list[asyncio.Future[None]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._closed = asyncio.Event()
        self.client_version = ""
        self.created_at = time.time()
        self.producers = ProducerEndpoint(self)
        self.consumers = ConsumerEndpoint(self)
        self.discovery = DiscoveryEndpoint(self)  # lookups, topic lists, schemas
        self.auth = ConnectionAuth(self)  # the role; CONNECT authentication and its refresh
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: self._on_pong,
            **self.discovery.handlers(),
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

    @property
    def original_principal(self) -> str | None:
        return self.auth.original_principal

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

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport reads next (``asyncio.BufferedProtocol``): straight into the
        entry of a large SEND being assembled, else into this thread's inbox, decoded in
        ``buffer_updated`` before any other read (P1 of issue #26: two copies less per byte
        of a batch entry)."""
        window = self._decoder.entry_window()
        self._reading_entry = window is not None
        return window if window is not None else _inbox()

    def buffer_updated(self, nbytes: int) -> None:
        if not self._reading_entry:
            self.data_received(_inbox()[:nbytes])
        elif not (self._closing or self._refused):
            self._decoder.entry_received(nbytes)
            self._after_read(nbytes)

    def data_received(self, data: bytes | memoryview) -> None:
        if self._closing or self._refused:
            return
        try:
            self._decoder.feed(data)
        except ProtocolError as exc:
            self._close_for_bad_input(str(exc))
            return
        self._after_read(len(data))

    def _after_read(self, nbytes: int) -> None:
        # Else the frames wait for the CONNECT's outcome, or for the turn that decodes the
        # frames left over from the last one (they come first: order is kept).
        if not self._connecting and self._backlog is None:
            self._decode_frames()
        if not self._read_this_turn:
            self._loop.call_soon(self._new_turn)  # runs after this turn's reads
        self._read_this_turn += nbytes
        if (
            self._read_this_turn >= READ_BYTES_PER_TURN
            and self._backlog is None
            and not (self._connecting or self._closing or self._refused)
        ):
            self._defer_decoding()  # reads no more in this turn; decodes the rest in the next

    def _new_turn(self) -> None:
        self._read_this_turn = 0

    def _decode_frames(self) -> None:
        """Dispatch the complete frames buffered, within this turn's budget (rule 4)."""
        decoded = self._spawned = 0
        deadline = time.perf_counter() + DECODE_SECONDS_PER_TURN
        try:
            for frame in self._decoder:
                # Liveness is a whole frame, as in Java (PulsarHandler.messageReceived): a peer
                # dribbling the bytes of a frame it never finishes is not alive (slowloris).
                decoded += 1
                self._frame_seen = True
                self._dispatch(frame)
                if self._closing or self._refused or self._connecting:
                    break
                if (
                    self._unfinished is not None
                    or decoded >= FRAMES_PER_TURN
                    or self._spawned >= REQUESTS_PER_TURN
                    or time.perf_counter() >= deadline
                ):
                    self._defer_decoding()
                    break
        except ProtocolError as exc:
            self._close_for_bad_input(str(exc))
        self.frames_received += decoded
        if decoded:
            self._wake_alive_waiters()

    def _defer_decoding(self) -> None:
        """The budget is spent: read nothing more, decode what is buffered in the next turn."""
        self._backlog = self._loop.call_soon(self._continue_decoding)
        self._sync_reading()

    def _continue_decoding(self) -> None:
        self._backlog = None
        if self._closing or self._refused:
            return  # a refusal drops what is buffered; a close reads nothing more
        step = self._unfinished
        if step is not None:
            if step():
                self._unfinished = None
            self._defer_decoding()  # its next part, or the frames behind it, in the next turn
            return
        if not self._connecting:
            self._decode_frames()
        if self._backlog is None and not self._connecting:
            # Reading resumes a turn later: bytes read in this turn's I/O phase would otherwise
            # be decoded in the same turn, on top of what this one already decoded.
            self._backlog = self._loop.call_soon(self._resume_reading)
            return
        self._sync_reading()

    def _resume_reading(self) -> None:
        self._backlog = None
        if not (self._closing or self._refused or self._connecting):
            self._decode_frames()  # frames buffered meanwhile (none while reading was paused)
        self._sync_reading()

    def finish_in_turns(self, step: Callable[[], bool]) -> None:
        """The frame being handled needs more than this turn (a huge ACK): call ``step`` once
        in each later turn, before this connection decodes anything else, until it returns
        True (finished). Frames behind it wait, so they still see its whole effect."""
        self._unfinished = step

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._closed.set()
        self._service.connections.discard(self)
        self._service.connection_limiter.release(self._peer_ip)
        for timer in self._timers:
            timer.cancel()
        if self._backlog is not None:
            self._backlog.cancel()
            self._backlog = None
        self._unfinished = None
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
        self._spawned += 1
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
        if self._connected or self._connecting:
            raise _CloseConnection("second CONNECT")  # Java: only in state Start
        cmd = frame.command.connect
        self.client_version = cmd.client_version
        self._protocol_version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
        outcome = self.auth.on_connect(cmd, SERVER_VERSION, self._protocol_version)
        if outcome is ConnectOutcome.ACCEPTED:
            self._accept_connect()
        elif outcome is ConnectOutcome.REFUSED:
            self._stop_decoding()
        else:  # PENDING: read nothing until the check is done (connect_finished)
            self._connecting = True
            self.pause_reading()

    def connect_finished(self, accepted: bool) -> None:
        self._connecting = False
        if not accepted:
            self._stop_decoding()
            return
        self._accept_connect()
        self.resume_reading()
        if self._backlog is None:  # else that turn comes first and decodes them, in order
            self._decode_frames()  # whatever arrived behind the CONNECT

    def _accept_connect(self) -> None:
        self._connected = True
        self.write(
            commands.connected(
                SERVER_VERSION,
                protocol_version=self._protocol_version,
                max_message_size=self._config.max_message_size,
            )
        )

    def _stop_decoding(self) -> None:
        """A refused CONNECT: drop every byte buffered behind it and decode nothing more (each
        CONNECT in one write would otherwise be one more password guess). Reading is paused
        and the refusal closes the connection after its delay (``refuse_after``)."""
        self._refused = True
        self._decoder = FrameDecoder(max_frame_size=8)

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

    # ------------------------------------------------------------------ flow control

    def pause_reading(self) -> None:
        """Read nothing until ``resume_reading`` (frames already read are still decoded)."""
        if not self.reading_paused:
            self.reading_paused = True
            self._sync_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and not self._closing:
            self.reading_paused = False
            self._sync_reading()

    def _sync_reading(self) -> None:
        """Pause or resume the socket: it reads only when no reason to pause holds."""
        paused = self.reading_paused or self._backlog is not None
        if paused == self._socket_paused or self._transport is None or self._closing:
            return
        self._socket_paused = paused
        if paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

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
