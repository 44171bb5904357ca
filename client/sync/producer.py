"""``Producer``: the blocking producer (``pulsar.Producer``'s API) over an ``AsyncProducer``.

``send`` and ``send_async`` take ``prepare_send``'s parameters (``client.producer.send_api``),
as the asyncio producer does, and check them in the calling thread, so a bad argument fails
there, at once. ``send_async(content, callback)`` calls ``callback(result, message_id)`` as the
official client does (``result`` is a ``Result``; ``message_id`` is None on failure), on the
client's loop thread: a callback must not block, and must not call blocking methods of this
client (that would deadlock; it raises ``RuntimeError`` instead). Without a callback it
returns a ``concurrent.futures.Future``. ``max_pending_messages`` is enforced in the calling
thread: with ``block_if_queue_full`` the call blocks there, otherwise the message is refused
with ``ProducerQueueIsFull``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, cast

from client.batching import OutgoingMessage
from client.errors import (
    InvalidMessage,
    OperationNotSupported,
    ProducerQueueIsFull,
    PulsarException,
    Result,
)
from client.message_id import MessageId
from client.partitioned_producer import AsyncPartitionedProducer
from client.producer import AsyncProducer, PayloadEncoder, prepare_send
from client.producer.bulk import BulkReceipt, Rows, numbered, prepare_rows, send_ops
from client.signatures import copy_parameters, same_parameters
from client.sync.runner import Runner

__all__ = ["BulkCallback", "Producer", "SendCallback"]

logger = logging.getLogger(__name__)
P = ParamSpec("P")
SendCallback = Callable[[Result, MessageId | None], None]
BulkCallback = Callable[[Result, BulkReceipt | None], None]


class _SendAsync(Protocol[P]):
    """The blocking ``send_async``: the send parameters, with the official ``callback`` second."""

    def __call__(
        self,
        content: Any,
        callback: SendCallback | None = None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> concurrent.futures.Future[MessageId] | None: ...


def _with_callback(
    source: Callable[Concatenate[Any, Any, P], Any],
) -> Callable[[Callable[..., concurrent.futures.Future[MessageId] | None]], _SendAsync[P]]:
    """``same_parameters`` for ``send_async``: ``source``'s parameters after the schema, with
    the decorated method's ``callback`` after the content (which typing cannot insert)."""

    def decorate(
        method: Callable[..., concurrent.futures.Future[MessageId] | None],
    ) -> _SendAsync[P]:
        copy_parameters(method, source)
        return cast("_SendAsync[P]", method)

    return decorate


class Producer:
    """Blocking producer (``pulsar.Producer``'s API) over an ``AsyncProducer``."""

    def __init__(
        self,
        runner: Runner,
        producer: AsyncProducer | AsyncPartitionedProducer,
        schema: PayloadEncoder | None,
        max_pending_messages: int,
        block_if_queue_full: bool,
    ) -> None:
        self._runner = runner
        self._producer = producer
        # The schema bound once: the send methods pass their arguments on untouched.
        self._prepare = functools.partial(prepare_send, schema)
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

    @same_parameters(prepare_send)
    def send(self, *args: Any, **kwargs: Any) -> MessageId:
        """Publish and wait until the broker stored the message; see ``AsyncProducer.send``."""
        runner = self._runner
        runner.loop_thread.refuse_to_block_the_loop()
        done: concurrent.futures.Future[MessageId] = concurrent.futures.Future()
        runner.check_usable()
        message, sequence_id = self._prepare(*args, **kwargs)
        self._send(message, sequence_id, done, None)
        return done.result()

    @_with_callback(prepare_send)
    def send_async(
        self, content: Any, callback: SendCallback | None = None, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[MessageId] | None:
        """Queue a message; ``callback(result, message_id)`` or the returned future tells.

        Raises:
            ValueError: bad argument types (at once, in this thread).
            ClientUsedAfterFork, AlreadyClosed: the client cannot be used.
        """
        done: concurrent.futures.Future[MessageId] | None = (
            concurrent.futures.Future() if callback is None else None
        )
        self._runner.check_usable()
        message, sequence_id = self._prepare(content, *args, **kwargs)
        self._send(message, sequence_id, done, callback)
        return done

    def send_rows(
        self,
        payloads: Sequence[bytes | None],
        first_sequence_id: int | None = None,
        *,
        sequence_ids: Sequence[int] | None = None,
        keys: Sequence[str | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
        event_times: Sequence[int | None] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        callback: BulkCallback | None = None,
    ) -> concurrent.futures.Future[BulkReceipt] | None:
        """Send rows given as columns as whole batch entries (Magnetar's bulk path, see
        ``client.producer.bulk``): row ``i`` has sequence id ``first_sequence_id + i``, or
        ``sequence_ids[i]``, or with neither the producer's next. ``callback(result,
        receipt)`` (on the client's loop thread) or the returned future tells once every
        entry is answered. With explicit ids the entries are built here, in the calling
        thread (so a bad row raises here); otherwise on the loop, where the ids are taken. The
        call takes ``len(payloads)`` queue slots, waiting (with ``block_if_queue_full``) while
        the queue is full.

        Raises:
            MessageTooBig: a row alone exceeds the broker's limit (nothing is sent).
            OperationNotSupported: a partitioned or encrypting producer.
            ValueError, TypeError: bad columns.
        """
        self._runner.check_usable()
        producer = self._producer
        if not isinstance(producer, AsyncProducer):
            raise OperationNotSupported("send_rows takes a producer of one topic or partition")
        rows = Rows(payloads, 0, sequence_ids, keys, properties, event_times)
        explicit = first_sequence_id is not None or sequence_ids is not None
        entries = (
            prepare_rows(
                producer, numbered(producer, rows, first_sequence_id), max_messages, max_bytes
            )
            if explicit
            else None
        )
        done: concurrent.futures.Future[BulkReceipt] | None = (
            concurrent.futures.Future() if callback is None else None
        )
        count = len(payloads)
        if not count:
            _deliver_bulk(done, callback, BulkReceipt((), ()), None)
            return done
        block = self._block and not self._runner.loop_thread.on_loop_thread()
        if self._slots is not None and not self._slots.acquire(blocking=block, count=count):
            _deliver_bulk(done, callback, None, ProducerQueueIsFull("the producer's queue is full"))
            return done

        def finished(receipt: BulkReceipt | None, error: PulsarException | None) -> None:
            self._release(count)  # on the loop thread, with the last entry's answer
            _deliver_bulk(done, callback, receipt, error)

        def enqueue() -> None:  # on the loop thread
            try:
                built = entries
                if built is None:
                    built = prepare_rows(
                        producer, numbered(producer, rows, None), max_messages, max_bytes
                    )
                producer.enqueue_ops(
                    send_ops(built, producer.entry_context().producer_id, finished)
                )
            except Exception as exc:
                error = exc if isinstance(exc, PulsarException) else InvalidMessage(repr(exc))
                finished(None, error)

        try:
            self._runner.submit(enqueue)
        except BaseException:
            self._release(count)
            raise
        return done

    def flush(self) -> None:
        self._runner.run(self._producer.flush())

    def close(self) -> None:
        self._runner.run(self._producer.close())

    def _send(
        self,
        message: OutgoingMessage,
        sequence_id: int | None,
        done: concurrent.futures.Future[MessageId] | None,
        callback: SendCallback | None,
    ) -> None:
        if sequence_id is not None and sequence_id < 0:
            raise ValueError(f"sequence_id must be >= 0, not {sequence_id}")
        # Blocking for room on the loop thread (a callback sending) would stop the very loop
        # that frees it: there a full queue refuses instead.
        block = self._block and not self._runner.loop_thread.on_loop_thread()
        if self._slots is not None and not self._slots.acquire(blocking=block):
            _deliver(done, callback, error=ProducerQueueIsFull("the producer's queue is full"))
            return
        try:
            self._runner.submit(
                self._enqueue, message, sequence_id, _Delivery(self, done, callback)
            )
        except BaseException:
            self._release()
            raise

    def _enqueue(
        self, message: OutgoingMessage, sequence_id: int | None, delivery: _Delivery
    ) -> None:
        # On the loop thread.
        try:
            self._producer.enqueue_to(delivery, message, sequence_id)
        except Exception as exc:
            error = exc if isinstance(exc, PulsarException) else InvalidMessage(repr(exc))
            delivery.set_exception(error)

    def _release(self, count: int = 1) -> None:
        if self._slots is not None:
            self._slots.release(count)


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

    def acquire(self, blocking: bool, count: int = 1) -> bool:
        """Take ``count`` slots once one is free: a bulk call may overdraw the bound, as the
        asyncio producer's queue lets it (``client.producer.bulk``), so it never waits for
        more room than the bound has."""
        with self._condition:
            while self._available <= 0:
                if not blocking:
                    return False
                self._waiting += 1
                try:
                    self._condition.wait()
                finally:
                    self._waiting -= 1
            self._available -= count
            return True

    def release(self, count: int = 1) -> None:
        with self._condition:
            self._available += count
            if self._waiting:
                self._condition.notify(count)


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


def _deliver_bulk(
    done: concurrent.futures.Future[BulkReceipt] | None,
    callback: BulkCallback | None,
    receipt: BulkReceipt | None,
    error: PulsarException | None,
) -> None:
    if done is not None:
        if receipt is not None:
            done.set_result(receipt)
        else:
            done.set_exception(error or PulsarException("no receipt"))
        return
    assert callback is not None
    try:
        callback(Result.Ok if error is None else error.result, receipt)
    except Exception:
        logger.exception("exception in a send_rows callback (ignored)")


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
