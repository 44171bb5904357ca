"""``send`` and ``send_async``: the official arguments, checked into an ``OutgoingMessage``.

``prepare_send`` is the one definition of the send parameters (the official names, order and
defaults): ``AsyncProducer.send`` / ``send_async``, the partitioned producer's, and the
blocking ``Producer.send`` / ``send_async`` all take exactly its parameters after the schema
(``client.signatures``). It is pure and thread-safe: the blocking facade calls it in the
application's thread, so a bad argument fails there, at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from client.arguments import check_type, check_type_or_none
from client.batching import OutgoingMessage
from client.message_id import MessageId
from client.producer.config import PayloadEncoder
from client.signatures import same_parameters
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY

__all__ = [
    "IDEMPOTENCY_KEY_PROPERTY",
    "PreparedSender",
    "SendApi",
    "prepare_message",
    "prepare_send",
]


def prepare_send(
    schema: PayloadEncoder | None,
    content: Any,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: str | bytes | None = None,
    sequence_id: int | None = None,
    replication_clusters: Sequence[str] | None = None,
    disable_replication: bool = False,
    event_timestamp: int | None = None,
    deliver_at: int | None = None,
    deliver_after: timedelta | None = None,
    *,
    idempotency_key: str | None = None,
) -> tuple[OutgoingMessage, int | None]:
    """The message a send's arguments describe (its sequence id is set when queued), and the
    sequence id asked for (None: the producer's next).

    ``content`` is encoded with ``schema`` when there is one. ``idempotency_key`` becomes the
    property ``magnetar.idempotency-key`` (issue #16): the broker stores a message whose key it
    saw on the topic within its window only once. ``replication_clusters`` and
    ``disable_replication`` are accepted for compatibility with the official API and ignored
    (Magnetar runs one cluster).

    Raises:
        ValueError: an argument has the wrong type (the official client raises ValueError).
        TypeError: content that is not bytes, without a schema (as the official).
    """
    if content is None:
        payload, null_value = b"", True
    else:
        payload = schema.encode(content) if schema is not None else content
        if not isinstance(payload, bytes):  # TypeError: the official BytesSchema's
            raise TypeError(
                f"Invalid record obj of type {type(payload)} - expected type is <class 'bytes'>"
            )
        null_value = False
    if properties is not None and (
        not isinstance(properties, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())
    ):
        raise ValueError("properties must be a dict of str to str")
    if partition_key is not None and not isinstance(partition_key, str):
        raise ValueError("partition_key must be a str")
    if isinstance(ordering_key, str):
        ordering_key = ordering_key.encode()
    elif ordering_key is not None and not isinstance(ordering_key, bytes):
        raise ValueError("ordering_key must be a str")
    if event_timestamp is not None and not isinstance(event_timestamp, int):
        raise ValueError("event_timestamp must be an int (ms since the epoch)")
    if not (  # one test on the hot path; the official message comes from the slow path
        (sequence_id is None or isinstance(sequence_id, int))
        and (replication_clusters is None or isinstance(replication_clusters, list))
        and isinstance(disable_replication, bool)
        and (deliver_at is None or isinstance(deliver_at, int))
        and (deliver_after is None or isinstance(deliver_after, timedelta))
    ):
        _refuse_send_arguments(
            sequence_id, replication_clusters, disable_replication, deliver_at, deliver_after
        )
    if deliver_after is not None:
        deliver_at = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
    merged = dict(properties) if properties else {}
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ValueError("idempotency_key must be a non-empty str")
        merged[IDEMPOTENCY_KEY_PROPERTY] = idempotency_key
    message = OutgoingMessage(
        payload,
        -1,
        merged,
        partition_key,
        ordering_key,
        event_timestamp or 0,
        deliver_at,
        null_value,
    )
    return message, sequence_id


def prepare_message(
    content: Any,
    schema: PayloadEncoder | None = None,
    *,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: str | bytes | None = None,
    event_timestamp: int | None = None,
    deliver_at: int | None = None,
    deliver_after: timedelta | None = None,
    idempotency_key: str | None = None,
) -> OutgoingMessage:
    """``prepare_send``'s message alone, from keyword arguments.

    Raises:
        ValueError: an argument has the wrong type.
    """
    message, _ = prepare_send(
        schema,
        content,
        properties,
        partition_key,
        ordering_key,
        event_timestamp=event_timestamp,
        deliver_at=deliver_at,
        deliver_after=deliver_after,
        idempotency_key=idempotency_key,
    )
    return message


class PreparedSender(Protocol):
    """The producer of one topic (partition), which queues prepared messages."""

    async def send_prepared(
        self, message: OutgoingMessage, sequence_id: int | None = None
    ) -> asyncio.Future[MessageId]: ...


class SendApi:
    """``send`` and ``send_async`` with the official arguments, for a producer of one topic
    and for one of a partitioned topic: they differ only in where a message goes."""

    def _schema(self) -> PayloadEncoder | None:
        raise NotImplementedError

    def _target(self, message: OutgoingMessage) -> PreparedSender:
        """The producer of the topic (partition) ``message`` goes to."""
        raise NotImplementedError

    @same_parameters(prepare_send)
    async def send(self, *args: Any, **kwargs: Any) -> MessageId:
        """Publish a message and return its id once the broker stored it (arguments: see
        ``prepare_send``).

        With ``idempotency_key``, a message whose key the topic (partition) saw within its
        window is not stored again: the id returned is then the original's entry.

        Raises:
            ProducerQueueIsFull: too many pending messages and ``block_if_queue_full`` off.
            Timeout: not acknowledged within ``send_timeout_millis``.
            ProducerFenced, TopicTerminated, AlreadyClosed, MessageTooBig, ChecksumError.
        """
        future = await self.send_async(*args, **kwargs)
        return await future

    @same_parameters(prepare_send)
    async def send_async(self, *args: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Queue a message; return a future of its id (pipelining: await it later).

        Waits for room first when the queue is full and ``block_if_queue_full`` is on.
        """
        message, sequence_id = prepare_send(self._schema(), *args, **kwargs)
        return await self._target(message).send_prepared(message, sequence_id)


def _refuse_send_arguments(
    sequence_id: object,
    replication_clusters: object,
    disable_replication: object,
    deliver_at: object,
    deliver_after: object,
) -> None:
    """Raises the official ``ValueError`` for the first send argument of the wrong type."""
    check_type_or_none(int, sequence_id, "sequence_id")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    check_type_or_none(int, deliver_at, "deliver_at")
    check_type_or_none(timedelta, deliver_after, "deliver_after")
