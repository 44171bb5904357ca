"""``AsyncMultiTopicConsumer``: one subscription over a list of topics or a regex pattern.

As the official clients' ``MultiTopicsConsumerImpl`` / ``PatternMultiTopicsConsumerImpl``: one
``AsyncConsumer`` per topic, all with the same subscription and options, their messages merged
into one receive queue. A pump task per topic moves messages from its consumer's queue into
the merged one, which holds at most ``receiver_queue_size`` messages (a full queue stops the
pumps, so each topic's own receiver queue and FLOW permits apply the back-pressure).
``message.topic_name()`` and ``message.message_id().topic_name()`` tell which topic a message
came from, and acknowledgements go to that topic's consumer.

A pattern (``re.Pattern``, matched against full topic names such as
``persistent://public/default/orders-.*``) is resolved in its namespace with
GET_TOPICS_OF_NAMESPACE (persistent topics), then re-checked every
``pattern_auto_discovery_period`` seconds: new matching topics are subscribed, deleted ones
dropped.

``seek`` by publish time, earliest or latest moves every topic; by a message's id, its topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections import deque
from collections.abc import Awaitable, Callable

from client.consumer import AsyncConsumer
from client.consumer.batch_receive import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    BatchReceivePolicy,
    gather_batch,
)
from client.errors import (
    AlreadyClosed,
    InvalidConfiguration,
    InvalidTopicName,
    OperationNotSupported,
    PulsarException,
    Timeout,
)
from client.message import Message
from client.message_id import MessageId

__all__ = ["AsyncMultiTopicConsumer", "pattern_namespace"]

logger = logging.getLogger(__name__)


Subscribe = Callable[[str], Awaitable[AsyncConsumer]]
ListTopics = Callable[[str], Awaitable[list[str]]]


def pattern_namespace(pattern: re.Pattern[str]) -> str:
    """The ``tenant/namespace`` a topic pattern lists (``persistent://`` is optional).

    Raises:
        InvalidTopicName: the pattern does not start with a literal tenant and namespace.
    """
    text = pattern.pattern.removeprefix("persistent://").removeprefix("non-persistent://")
    parts = text.split("/")
    if len(parts) < 3 or any(re.escape(part) != part for part in parts[:2]):
        raise InvalidTopicName(
            f"a topic pattern must name its namespace literally: {pattern.pattern!r}"
        )
    return f"{parts[0]}/{parts[1]}"


class AsyncMultiTopicConsumer:
    """A consumer of several topics; create it with ``AsyncClient.subscribe([...])`` or a
    compiled pattern."""

    def __init__(
        self,
        subscribe: Subscribe,
        subscription_name: str,
        receiver_queue_size: int,
        *,
        topics: list[str] | None = None,
        pattern: re.Pattern[str] | None = None,
        list_topics: ListTopics | None = None,
        expand: ListTopics | None = None,
        discovery_period: float = 60,
        name: str | None = None,
        consumer_name: str | None = None,
        batch_receive_policy: BatchReceivePolicy = DEFAULT_BATCH_RECEIVE_POLICY,
    ) -> None:
        if (topics is None) == (pattern is None):
            raise InvalidConfiguration("give either topics or a pattern")
        self._subscribe = subscribe
        self._subscription = subscription_name
        self._topics = list(dict.fromkeys(topics or []))
        self._pattern = pattern
        self._list_topics = list_topics
        self._expand = expand
        self._discovery_period = discovery_period
        self._name = name
        self._consumer_name = consumer_name or os.urandom(5).hex()
        self._batch_receive_policy = batch_receive_policy
        self._capacity = max(1, receiver_queue_size)
        self._children: dict[str, AsyncConsumer] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._queue: deque[Message] = deque()
        self._arrived = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._discovery: asyncio.Task[None] | None = None
        self._closed = False

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe to every topic (or every topic the pattern matches now)."""
        try:
            for topic in await self._wanted_topics():
                await self._add(topic)
        except BaseException:
            await self.close()
            raise
        if self._discovery_period > 0 and (self._pattern is not None or self._expand is not None):
            self._discovery = asyncio.get_running_loop().create_task(self._discover_forever())

    async def _wanted_topics(self) -> list[str]:
        if self._pattern is None:
            if self._expand is None:
                return self._topics
            expand = self._expand
            return [name for topic in self._topics for name in await expand(topic)]
        assert self._list_topics is not None
        pattern = self._pattern
        listed = await self._list_topics(pattern_namespace(pattern))
        # As Java's TopicList.filterTopics: the domain is left out on both sides, so one
        # pattern matches persistent and non-persistent topics (the mode chose which are listed).
        short = _short_pattern(pattern)
        return sorted(t for t in listed if short.fullmatch(_short(t)))

    async def _add(self, topic: str) -> None:
        child = await self._subscribe(topic)
        name = child.topic()
        self._children[name] = child
        self._pumps[name] = asyncio.get_running_loop().create_task(self._pump(child))

    async def _remove(self, topic: str) -> None:
        pump = self._pumps.pop(topic)
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        await self._children.pop(topic).close()

    async def _discover_forever(self) -> None:
        while True:
            await asyncio.sleep(self._discovery_period)
            try:
                await self.check_for_new_topics()
            except PulsarException as exc:
                logger.warning("%r: topic discovery failed, retrying later: %r", self, exc)

    async def check_for_new_topics(self) -> None:
        """Subscribe to topics matching the pattern since the last check and drop deleted ones;
        for a list of topics, subscribe to partitions added since (partitions never go)."""
        wanted = set(await self._wanted_topics())
        for topic in sorted(wanted - set(self._children)):
            await self._add(topic)
        if self._pattern is None:
            return
        for topic in sorted(set(self._children) - wanted):
            await self._remove(topic)

    async def _pump(self, child: AsyncConsumer) -> None:
        topic = child.topic()
        while True:
            await self._space.wait()
            try:
                message = await child.receive()
            except AlreadyClosed:
                return
            # An id that knows its topic routes acknowledgements given as ids.
            message.message_id()._topic = topic
            self._queue.append(message)
            self._arrived.set()
            if len(self._queue) >= self._capacity:
                self._space.clear()

    # --- what the application sees ------------------------------------------------------

    def topic(self) -> str:
        """The partitioned topic's name, the pattern, or the topics joined by commas."""
        if self._name is not None:
            return self._name
        return self._pattern.pattern if self._pattern is not None else ",".join(self._topics)

    def topics(self) -> list[str]:
        """The topics subscribed now."""
        return sorted(self._children)

    def subscription_name(self) -> str:
        return self._subscription

    @property
    def queued(self) -> int:
        """Messages merged here and not yet received by the application."""
        return len(self._queue)

    def consumers(self) -> list[AsyncConsumer]:
        """The consumer of each topic (partition) read now."""
        return list(self._children.values())

    def is_connected(self) -> bool:
        return all(child.is_connected() for child in self._children.values())

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message of any topic; see ``AsyncConsumer.receive``."""
        try:
            async with asyncio.timeout(None if timeout_millis is None else timeout_millis / 1000):
                while not self._queue:
                    self._check_open()
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            raise Timeout(f"no message within {timeout_millis} ms") from None
        return self._take()

    async def batch_receive(
        self, max_num_messages: int | None = None, timeout_ms: int | None = None
    ) -> list[Message]:
        """See ``AsyncConsumer.batch_receive``."""
        policy = self._batch_receive_policy
        return await gather_batch(
            self.receive,
            self._check_open,
            policy.getMaxNumMessages() if max_num_messages is None else max_num_messages,
            policy.getMaxNumBytes(),
            policy.getTimeoutMs() if timeout_ms is None else timeout_ms,
        )

    def consumer_name(self) -> str:
        return self._consumer_name

    def _take(self) -> Message:
        message = self._queue.popleft()
        if len(self._queue) < self._capacity:
            self._space.set()
        return message

    def __aiter__(self) -> AsyncMultiTopicConsumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge on the message's own topic.

        Raises:
            OperationNotSupported: an id naming no topic of this consumer (a send's id names
                none), as the official.
        """
        self.route(message).acknowledge(message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge up to this message on its own topic; errors as ``acknowledge``."""
        self.route(message).acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Redeliver the message later; an id naming no topic of this consumer is ignored (as
        the official multi-topic consumer, whose negative acknowledgement reports nothing)."""
        self._check_open()
        child = self._child_of(message)
        if child is None:
            logger.debug(
                "%s: negative acknowledgement of %r ignored: no topic of it", self, message
            )
            return
        child.negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        self._queue.clear()
        self._space.set()
        for child in self._children.values():
            child.redeliver_unacknowledged_messages()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription, as the official multi-topic consumers do: a publish time
        (ms), ``MessageId.earliest`` or ``MessageId.latest`` moves it on every topic; the id of
        a message of one topic (from its message, or ``MessageId.deserialize(data, topic)``)
        moves it on that topic only. Messages queued from the topics that moved are dropped.

        Raises:
            InvalidConfiguration: an id that names no topic and is neither earliest nor latest,
                or the id of a topic this consumer does not read.
        """
        target = messageid  # the official parameter name
        self._check_open()
        children = list(self._children.values())
        if isinstance(target, MessageId) and target not in (MessageId.earliest, MessageId.latest):
            child = self._children.get(target.topic_name() or "")
            if child is None:
                raise InvalidConfiguration(
                    f"seek to {target!r} on several topics: the id must come from one of their "
                    "messages (or MessageId.deserialize(data, topic)), or be earliest or latest"
                )
            children = [child]
        await asyncio.gather(*(self._seek_child(child, target) for child in children))

    async def _seek_child(self, child: AsyncConsumer, target: MessageId | int) -> None:
        # The pump stops first, so no message from before the seek reaches the shared queue
        # afterwards; what it already moved there is dropped; it restarts once the topic's
        # consumer has resubscribed at the new position.
        name = child.topic()
        pump = self._pumps.pop(name, None)
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        self._queue = deque(m for m in self._queue if m.topic_name() != name)
        if len(self._queue) < self._capacity:
            self._space.set()
        try:
            await child.seek(target)
        finally:
            if not self._closed and self._children.get(name) is child:
                self._pumps[name] = asyncio.get_running_loop().create_task(self._pump(child))

    async def unsubscribe(self) -> None:
        """Delete the subscription on every topic, then close."""
        self._check_open()
        await self._stop_discovery()
        await asyncio.gather(*(child.unsubscribe() for child in self._children.values()))
        await self.close()

    async def close(self) -> None:
        """Close every topic's consumer; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._arrived.set()
        await self._stop_discovery()
        for pump in self._pumps.values():
            pump.cancel()
        await asyncio.gather(*self._pumps.values(), return_exceptions=True)
        self._pumps.clear()
        children = list(self._children.values())
        self._children.clear()
        await asyncio.gather(*(child.close() for child in children))
        self._queue.clear()

    async def _stop_discovery(self) -> None:
        task, self._discovery = self._discovery, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"consumer on {self.topic()} is closed")

    def route(self, message: Message | MessageId) -> AsyncConsumer:
        """The consumer of the topic ``message`` came from. Callable from any thread (the
        blocking consumer checks here, so that its caller gets the error).

        Raises:
            AlreadyClosed: this consumer is closed.
            OperationNotSupported: the message or id names no topic of this consumer, as the
                official multi-topic consumer answers (a send's id names none).
        """
        self._check_open()
        child = self._child_of(message)
        if child is None:
            raise OperationNotSupported(
                f"{message!r} is not from a topic of this consumer (ids must come from its "
                "messages, or MessageId.deserialize(data, topic))"
            )
        return child

    def _child_of(self, message: Message | MessageId) -> AsyncConsumer | None:
        topic = message.topic_name()
        return self._children.get(topic) if topic is not None else None

    def __repr__(self) -> str:
        return f"<AsyncMultiTopicConsumer {self._subscription} on {self.topic()}>"


def _short(topic: str) -> str:
    """``tenant/ns/name``: the topic without its domain (and partition suffix)."""
    return _without_partition(topic).partition("://")[2] or _without_partition(topic)


def _short_pattern(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern without its ``persistent://`` / ``non-persistent://`` prefix."""
    for domain in ("persistent://", "non-persistent://"):
        if pattern.pattern.startswith(domain):
            return re.compile(pattern.pattern.removeprefix(domain), pattern.flags)
    return pattern


def _without_partition(topic: str) -> str:
    """A partition ``t-partition-3`` matches a pattern as its topic ``t`` does."""
    base, sep, index = topic.rpartition("-partition-")
    return base if sep and index.isdigit() else topic
