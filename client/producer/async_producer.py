"""``AsyncProducer``: an effectively-once producer (PIP-6), asyncio-native.

The recipe of the seeds, kept by construction:

* Every SEND stays in ``PendingSends`` with its exact frame until the broker answers it.
* On any connection loss (socket error, keep-alive silence, broker CLOSE_PRODUCER, a SEND_ERROR
  other than ChecksumError, an out-of-order receipt) the producer looks the topic up again,
  reconnects with backoff, re-creates itself with the **same name** (the broker-assigned one
  if the application gave none) and the **topic epoch** it last held (PIP-68), then writes
  every pending frame again, **in order, with the same sequence ids**. The broker's dedup
  stores each message once; a copy it already has is answered with id ``-1:-1``, which
  completes the send like any receipt (the returned id shows it).
* A "dedup state unknown" answer (SEND_ERROR ``PersistenceError`` and the like) is never shown
  to the application: it is one more reason to reconnect and resend.
* ``send_timeout_millis=0`` never gives up; otherwise, as in the C++ client, when the oldest
  pending send passes its deadline every pending send fails with ``Timeout``.
* ``ChecksumError`` fails just that message; ``ProducerFenced`` (and ``TopicTerminated``) on
  re-creation are terminal: every pending and later send fails with it.

Sequence ids: ``last_sequence_id()`` starts at ``initial_sequence_id`` or, if none was given,
at what PRODUCER_SUCCESS reports for this producer name, so an application resumes its
numbering after a restart; automatic ids continue from it. ``send(..., sequence_id=n)`` sets
one explicitly, and later automatic ids continue above it (the C++ client does not move its
counter, so a mix of both sends ids that dedup takes for duplicates).

Cancelling ``await producer.send(...)`` while it waits for room in a full queue sends nothing
and uses no sequence id. Once a message is queued it is not withdrawn by cancellation (it may
already be on the wire, and withdrawing it would leave its fate unknown): it is still sent,
in order, and only the caller stops waiting.

Batching, compression and chunking plug in through ``client.accumulator``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from typing import TYPE_CHECKING, Protocol

from client.accumulator import Accumulator, EntryContext
from client.batching import OutgoingMessage
from client.config import ClientConfig
from client.crypto import MessageEncryptor
from client.errors import (
    AlreadyClosed,
    ChecksumError,
    Disconnected,
    NotConnected,
    ProducerBlockedQuotaExceededException,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarException,
    Timeout,
    TopicTerminated,
    from_server_error,
)
from client.message_id import MessageId
from client.pending import Completion, OutOfOrderReceipt, PendingSends, SendOp
from client.producer.bulk import BulkSendApi
from client.producer.config import PayloadEncoder, ProducerConfig
from client.producer.entries import entry_context, new_accumulator
from client.producer.send_api import SendApi
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.ids import from_u64
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from client.connection import Connection

__all__ = ["AsyncProducer", "ProducerHost"]

logger = logging.getLogger(__name__)


class ProducerHost(Protocol):
    """What a producer needs from its client."""

    @property
    def config(self) -> ClientConfig: ...

    async def connection_for(self, topic: str) -> Connection: ...

    def producer_closed(self, producer: AsyncProducer) -> None: ...


class _State(enum.Enum):
    CONNECTING = "connecting"  # created or reconnecting: sends are queued
    READY = "ready"  # connected: sends go out at once
    CLOSING = "closing"
    CLOSED = "closed"
    FENCED = "fenced"  # terminal: ProducerFenced / TopicTerminated
    FAILED = "failed"  # first creation failed


_SENDABLE = frozenset({_State.CONNECTING, _State.READY})


class AsyncProducer(SendApi, BulkSendApi):
    """A producer on one topic; create it with ``AsyncClient.create_producer``."""

    def __init__(
        self, host: ProducerHost, topic: str, producer_id: int, config: ProducerConfig
    ) -> None:
        self._host = host
        self._topic = topic
        # The partition index (-1: not a partition) that the ids of sent messages carry.
        self._partition = TopicName.parse(topic, allow_non_persistent=True).partition
        self._producer_id = producer_id
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._state = _State.CONNECTING
        self._terminal_error: PulsarException | None = None
        self._name = config.producer_name
        self._epoch = 0
        self._topic_epoch: int | None = None
        self._schema_version: bytes | None = None
        initial = -1 if config.initial_sequence_id is None else config.initial_sequence_id
        self._last_sequence_id = initial
        self._next_sequence_id = initial + 1
        self._pending = PendingSends(config.max_pending_messages)
        self._accumulator: Accumulator | None = None
        self._send_timeout = config.send_timeout_millis / 1000
        self._cnx: Connection | None = None
        self._creating_on: Connection | None = None
        self._created: asyncio.Future[None] = self._loop.create_future()
        self._connect_task: asyncio.Task[None] | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._batch_timer: asyncio.TimerHandle | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._deliver_on_close = True  # False: the client shuts down (pending messages fail)
        # One data key for the producer's life (rotated inside), kept across reconnections.
        self._encryptor: MessageEncryptor | None = None
        if config.encryption_keys:
            assert config.crypto_key_reader is not None  # ProducerConfig checks it
            self._encryptor = MessageEncryptor(config.encryption_keys, config.crypto_key_reader)

    # --- what the application sees ------------------------------------------------------

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        """The name given, or the one the broker assigned."""
        return self._name or ""

    def last_sequence_id(self) -> int:
        """The highest sequence id the broker acknowledged (-1 if none yet)."""
        return self._last_sequence_id

    def is_connected(self) -> bool:
        return self._state is _State.READY

    def _schema(self) -> PayloadEncoder | None:
        return self._config.schema

    def _target(self, message: OutgoingMessage) -> AsyncProducer:
        return self

    async def send_prepared(
        self, message: OutgoingMessage, sequence_id: int | None = None
    ) -> asyncio.Future[MessageId]:
        """``send_async`` of a message ``prepare_message`` made: waits for room first when the
        queue is full and ``block_if_queue_full`` is on."""
        await self.wait_for_room()
        return self.enqueue(message, sequence_id)

    async def wait_for_room(self) -> None:
        """Wait while the queue is full, when ``block_if_queue_full`` is on."""
        if self._config.block_if_queue_full:
            while not self._pending.has_room():
                self._check_sendable()
                await self._pending.wait_for_room()

    def enqueue(
        self, message: OutgoingMessage, sequence_id: int | None = None
    ) -> asyncio.Future[MessageId]:
        """Queue a prepared message now (no waiting); the future completes with its id.

        Raises:
            ProducerQueueIsFull: no room (``max_pending_messages``).
            ValueError: a negative sequence id.
        """
        future: asyncio.Future[MessageId] = self._loop.create_future()
        self.enqueue_to(future, message, sequence_id)
        return future

    def enqueue_to(
        self, completion: Completion, message: OutgoingMessage, sequence_id: int | None = None
    ) -> None:
        """``enqueue`` reporting to ``completion`` (the blocking facade's callbacks)."""
        self._check_sendable()
        pending = self._pending
        if not pending.has_room():
            raise ProducerQueueIsFull(
                f"{self._config.max_pending_messages} messages already pending on {self._topic}"
            )
        if sequence_id is None:
            sequence_id = self._next_sequence_id
        elif sequence_id < 0:
            raise ValueError(f"sequence_id must be >= 0, not {sequence_id}")
        accumulator = self._accumulator
        assert accumulator is not None  # set before creation completes
        ops = accumulator.add(message.numbered(sequence_id), completion, int(time.time() * 1000))
        pending.reserve(1)
        if sequence_id >= self._next_sequence_id:
            self._next_sequence_id = sequence_id + 1
        for op in ops:
            self._dispatch(op)
        if self._batch_timer is None and accumulator.deadline is not None:
            self._arm_batch_timer(accumulator.deadline)

    def enqueue_ops(self, ops: list[SendOp]) -> None:
        """Queue SEND operations built elsewhere (``client.producer.bulk``) now, in order and
        after what a batch holds; each takes ``op.permits`` queue slots.

        Raises:
            ProducerQueueIsFull: no room (``max_pending_messages``).
        """
        self._check_sendable()
        if not self._pending.has_room():
            raise ProducerQueueIsFull(f"no room for more messages on {self._topic}")
        self._drain_accumulator()
        for op in ops:
            self._pending.reserve(op.permits)
            self._next_sequence_id = max(self._next_sequence_id, op.last_sequence_id + 1)
            self._dispatch(op)

    async def flush(self) -> None:
        """Send whatever a batch holds and wait until every message queued so far is answered.

        Raises:
            the error of the last queued message, if it failed.
        """
        self._check_sendable()
        self._drain_accumulator()
        tracker = self._pending.track_oldest_to_newest()
        if tracker is not None:
            await tracker

    async def close(self) -> None:
        """Close the producer: deliver what is pending first, then detach from the broker.

        Unlike the official client, which fails pending messages with ``AlreadyClosed``,
        pending messages are given up to the operation timeout to be acknowledged; only what
        is still pending then fails with ``AlreadyClosed``.
        """
        task = self._close_task
        if task is not None and task.done():
            # As the official: a producer closed before says so (one closing now is awaited).
            raise AlreadyClosed(f"producer on {self._topic} is already closed")
        if task is None:
            task = self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(task)

    async def shutdown(self) -> None:
        """Close without delivering what is pending (it fails with ``AlreadyClosed``): the
        client's ``shutdown``."""
        self._deliver_on_close = False
        if self._close_task is None or not self._close_task.done():
            await self.close()

    # --- queueing -----------------------------------------------------------------------

    def _check_sendable(self) -> None:
        state = self._state
        if state in _SENDABLE:
            return
        if state is _State.FENCED and self._terminal_error is not None:
            raise type(self._terminal_error)(str(self._terminal_error))
        if state is _State.FAILED:
            raise NotConnected(f"producer on {self._topic} was never created")
        raise AlreadyClosed(f"producer on {self._topic} is closed")

    def _dispatch(self, op: SendOp) -> None:
        if not op.frame:  # failed while being built (e.g. a batch over the size limit)
            self._pending.release(op.permits)
            return
        if self._send_timeout:
            op.deadline = self._loop.time() + self._send_timeout
            if self._send_timer is None:
                self._send_timer = self._loop.call_at(op.deadline, self._on_send_timer)
        self._pending.append(op)
        cnx = self._cnx
        if cnx is not None:
            cnx.write(op.frame)

    def _drain_accumulator(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if self._accumulator is not None:
            for op in self._accumulator.drain():
                self._dispatch(op)

    def _arm_batch_timer(self, deadline_ms: int) -> None:
        delay = max(0.0, deadline_ms / 1000 - time.time())
        self._batch_timer = self._loop.call_later(delay, self._on_batch_timer)

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        if self._state in _SENDABLE or self._state is _State.CLOSING:
            self._drain_accumulator()

    def _on_send_timer(self) -> None:
        self._send_timer = None
        oldest = self._pending.oldest
        if oldest is None:
            return
        if oldest.deadline > self._loop.time():
            self._send_timer = self._loop.call_at(oldest.deadline, self._on_send_timer)
            return
        seconds = self._send_timeout
        count = self._fail_pending(
            Timeout(f"not acknowledged within send_timeout_millis ({seconds:g} s)")
        )
        logger.warning("%s: %d pending message(s) timed out", self, count)

    def _fail_pending(self, error: PulsarException) -> int:
        self._drain_accumulator()
        return self._pending.fail_all(error)

    # --- receipts (called by the connection) --------------------------------------------

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        ids = receipt.message_id
        try:
            op = self._pending.on_receipt(
                receipt.sequence_id, from_u64(ids.ledgerId), from_u64(ids.entryId), self._partition
            )
        except OutOfOrderReceipt as exc:
            self._distrust_connection(f"out-of-order receipt: {exc}")
            return
        if op is not None and op.permits:
            self._last_sequence_id = op.last_sequence_id

    def on_send_error(self, error: pb.CommandSendError) -> None:
        if int(error.error) != ServerError.ChecksumError:
            # Dedup "unknown" (PersistenceError) and the like: never shown to the application;
            # the C++ client's answer is the same: reconnect and resend.
            exc = from_server_error(error.error, error.message)
            self._distrust_connection(f"SEND_ERROR {type(exc).__name__}: {error.message}")
            return
        try:
            self._pending.on_send_error(error.sequence_id, ChecksumError(error.message))
        except OutOfOrderReceipt as exc:
            self._distrust_connection(f"out-of-order send error: {exc}")

    def _distrust_connection(self, why: str) -> None:
        cnx = self._cnx
        logger.warning("%s: %s; reconnecting to resend", self, why)
        if cnx is not None:
            cnx.abort(Disconnected(why))

    def on_closed_by_broker(self, connection: Connection) -> None:
        logger.info("%s: closed by the broker; reconnecting", self)
        self._connection_gone(connection)

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def _connection_gone(self, connection: Connection) -> None:
        if connection is self._creating_on:
            self._creating_on = None  # the creation in progress fails and is retried
        if connection is not self._cnx:
            return
        self._cnx = None
        if self._state is _State.READY:
            self._state = _State.CONNECTING
        if self._state in (_State.CONNECTING, _State.CLOSING) and (
            self._connect_task is None or self._connect_task.done()
        ):
            self._connect_task = self._loop.create_task(self._connect_loop())

    # --- (re)connection -----------------------------------------------------------------

    async def start(self) -> None:
        """Create the producer on the broker (``AsyncClient.create_producer`` calls this).

        Raises:
            Timeout: retriable failures until the operation timeout.
            PulsarException: a failure retrying cannot mend (ProducerBusy, ProducerFenced, ...).
        """
        self._connect_task = self._loop.create_task(self._connect_loop())
        try:
            await asyncio.shield(self._created)
        except asyncio.CancelledError:
            await self._abandon()
            raise

    async def _connect_loop(self) -> None:
        backoff = self._host.config.new_backoff()
        first = not self._created.done()
        deadline = self._loop.time() + self._host.config.operation_timeout
        while True:
            try:
                await self._create_on(await self._host.connection_for(self._topic))
                return
            except PulsarException as exc:
                if self._creation_failed(exc, first, deadline):
                    return
            await asyncio.sleep(backoff.next())

    def _creation_failed(self, exc: PulsarException, first: bool, deadline: float) -> bool:
        """Decide after a failed (re)creation; True when the producer stops trying."""
        if isinstance(exc, ProducerFenced) or (not first and isinstance(exc, TopicTerminated)):
            self._become_terminal(exc)
            return True
        if first:
            if not exc.retriable:
                self._fail_creation(exc)
                return True
            if self._loop.time() >= deadline:
                timeout = self._host.config.operation_timeout
                self._fail_creation(
                    Timeout(f"creating the producer took over {timeout:g} s: {exc}")
                )
                return True
        elif isinstance(exc, ProducerBlockedQuotaExceededException):
            self._fail_pending(exc)
        logger.warning("%s: cannot (re)create the producer, retrying: %r", self, exc)
        return False

    async def _create_on(self, cnx: Connection) -> None:
        epoch = self._epoch
        self._epoch += 1
        producer_id = self._producer_id
        cnx.register_producer(producer_id, self)
        self._creating_on = cnx
        try:
            answer = await cnx.request(
                lambda request_id: self._producer_command(request_id, epoch),
                on_waiting=self._on_waiting_for_exclusive,
            )
        except BaseException as exc:
            cnx.remove_producer(producer_id, self)
            if not isinstance(exc, PulsarException) or isinstance(exc, Timeout):
                # The broker may have created it after all: do not let it hold the name.
                cnx.send_request_nowait(lambda rid: commands.close_producer(producer_id, rid))
            raise
        if self._creating_on is not cnx or not cnx.is_ready:
            cnx.remove_producer(producer_id, self)
            raise Disconnected("the connection closed while the producer was being created")
        self._creating_on = None
        self._became_ready(cnx, answer.producer_success)

    def _producer_command(self, request_id: int, epoch: int) -> bytes:
        schema = self._config.schema.to_pb() if self._config.schema is not None else None
        return commands.producer(
            self._topic,
            self._producer_id,
            request_id,
            producer_name=self._name,
            metadata=self._config.properties,
            schema=schema,
            epoch=epoch,
            access_mode=self._config.access_mode,
            topic_epoch=self._topic_epoch,
        )

    def _on_waiting_for_exclusive(self) -> None:
        logger.info("%s: waiting for exclusive access to %s", self, self._topic)

    def _became_ready(self, cnx: Connection, success: pb.CommandProducerSuccess) -> None:
        first = not self._created.done()
        self._name = success.producer_name
        if success.HasField("topic_epoch"):
            self._topic_epoch = success.topic_epoch
        if success.HasField("schema_version"):
            self._schema_version = success.schema_version
        if first and self._config.initial_sequence_id is None:
            self._last_sequence_id = success.last_sequence_id
            self._next_sequence_id = success.last_sequence_id + 1
        if self._accumulator is None:
            self._accumulator = self._new_accumulator()
        self._cnx = cnx
        if self._state is _State.CONNECTING:
            self._state = _State.READY
        for op in self._pending:  # resend in order, the same bytes
            cnx.write(op.frame)
        logger.info("%s: ready on %s, resent %d", self, cnx.physical, len(self._pending))
        if first:
            self._created.set_result(None)

    def _new_accumulator(self) -> Accumulator:
        return new_accumulator(self._config, self.entry_context(), self._encryptor)

    def entry_context(self) -> EntryContext:
        """What this producer's entries are built with (valid once it is created)."""
        return entry_context(
            self._config,
            self._producer_id,
            self._name or "",
            self._schema_version,
            self._max_message_size,
        )

    def _max_message_size(self) -> int:
        cnx = self._cnx or self._creating_on
        return cnx.max_message_size if cnx is not None else commands.DEFAULT_MAX_MESSAGE_SIZE

    def _fail_creation(self, exc: PulsarException) -> None:
        self._state = _State.FAILED
        if not self._created.done():
            self._created.set_exception(exc)

    def _become_terminal(self, exc: PulsarException) -> None:
        logger.error("%s: %s; failing pending and future sends", self, exc)
        self._state = _State.FENCED
        self._terminal_error = exc
        self._fail_pending(type(exc)(str(exc)))
        self._pending.wake_all_waiters(type(exc)(str(exc)))
        if not self._created.done():
            self._created.set_exception(exc)

    # --- closing ------------------------------------------------------------------------

    async def _close(self) -> None:
        was = self._state
        self._state = _State.CLOSING
        try:
            if was in _SENDABLE and self._deliver_on_close:
                await self._deliver_pending(self._host.config.operation_timeout)
        finally:
            await self._detach(AlreadyClosed(f"producer on {self._topic} closed"))
            self._state = _State.CLOSED
            self._host.producer_closed(self)

    async def _deliver_pending(self, within: float) -> None:
        self._drain_accumulator()
        tracker = self._pending.track_oldest_to_newest()
        if tracker is None:
            return
        await asyncio.wait([tracker], timeout=within)
        if not tracker.done():
            tracker.cancel()
        elif not tracker.cancelled():
            tracker.exception()  # retrieved: the senders saw it

    async def _detach(self, error: PulsarException) -> None:
        """Stop everything: timers, reconnection, pending sends; tell the broker."""
        for timer in (self._send_timer, self._batch_timer):
            if timer is not None:
                timer.cancel()
        self._send_timer = self._batch_timer = None
        task, self._connect_task = self._connect_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail_pending(error)
        self._pending.wake_all_waiters(error)
        if not self._created.done():
            self._created.set_exception(error)
        cnx, self._cnx = self._cnx, None
        if cnx is None:
            return
        cnx.remove_producer(self._producer_id, self)
        if cnx.is_ready:
            try:
                await cnx.request(lambda rid: commands.close_producer(self._producer_id, rid))
            except PulsarException as exc:
                logger.info("%s: close not confirmed by the broker: %r", self, exc)

    async def _abandon(self) -> None:
        """Creation was cancelled: undo whatever got done."""
        self._state = _State.CLOSING
        await self._detach(AlreadyClosed("producer creation was cancelled"))
        self._state = _State.CLOSED
        self._host.producer_closed(self)
        if self._created.done() and not self._created.cancelled():
            self._created.exception()

    def __repr__(self) -> str:
        return f"<AsyncProducer {self._name or '?'} on {self._topic} ({self._state.value})>"
