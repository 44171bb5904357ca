"""``Client`` of ``client.asyncio``: the official ``pulsar.asyncio.Client`` over ``AsyncClient``.

Its methods take the official parameters, in the official order, with the official defaults
(the asyncio ``create_producer`` batches by default, unlike the blocking one); a test compares
them with ``inspect.signature``. Each official option goes to ``AsyncClient`` when it takes
it; otherwise it is one of three kinds:

* no effect here, accepted whatever its value: options that tune what Magnetar does not have
  (``replicate_subscription_state_enabled``: one cluster; ``batch_receive_policy``: this API
  has no ``batch_receive``) or
  that only bound memory of the C++ core (``max_total_receiver_queue_size_across_partitions``,
  ``broker_consumer_stats_cache_time_ms``, ``max_pending_chunked_message``, ...);
* handled here: ``is_pattern_topic`` (the pattern is compiled for ``AsyncClient``, which takes
  a ``re.Pattern``);
* refused with ``PulsarException(OperationNotSupported)`` when set to anything but its default:
  any other option ``AsyncClient`` does not take, since ignoring it could change what the
  application receives.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from client.asyncio.consumer import Consumer
from client.asyncio.errors import PulsarException, translated
from client.asyncio.lifecycle import ClientState
from client.asyncio.producer import Producer
from client.asyncio.reader import Reader
from client.batching import BatchingType
from client.client import AsyncClient
from client.consumer import ConsumerType, PayloadSchema, RegexSubscriptionMode
from client.consumer.policies import ConsumerCryptoFailureAction
from client.crypto import CryptoKeyReader
from client.dead_letter import ConsumerDeadLetterPolicy
from client.errors import Result
from client.key_shared import ConsumerKeySharedPolicy
from client.message import Message
from client.message_id import MessageId
from client.producer import PayloadEncoder
from client.routing import PartitionsRoutingMode
from client.service_info.active import ServiceSource
from protocol.enums import CompressionType, InitialPosition, ProducerAccessMode

__all__ = ["Client"]

logger = logging.getLogger(__name__)

# Official options with no effect on a Magnetar client (see the module docstring).
_NO_EFFECT = frozenset(
    {
        "max_total_receiver_queue_size_across_partitions",
        "broker_consumer_stats_cache_time_ms",
        "replicate_subscription_state_enabled",
        "max_pending_chunked_message",
        "auto_ack_oldest_chunked_message_on_queue_full",
        "batch_receive_policy",
        "crypto_failure_action",
        "subscription_role_prefix",
    }
)


def _parameters(method: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(method).parameters)


# What AsyncClient takes, read once: options it learns later are passed on without a change here.
_SUBSCRIBE_TAKES = _parameters(AsyncClient.subscribe)
_READER_TAKES = _parameters(AsyncClient.create_reader)


def _passed_on(
    takes: frozenset[str], options: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The options ``AsyncClient`` takes; the others dropped when without effect or at their
    default, else refused."""
    passed: dict[str, Any] = {}
    for name, value in options.items():
        if name in takes:
            passed[name] = value
        elif name not in _NO_EFFECT and value != defaults[name]:
            raise PulsarException(
                Result.OperationNotSupported, f"{name} is not supported by this client yet"
            )
    return passed


class Client:
    """The asyncio Pulsar client (``pulsar.asyncio.Client``).

    Args:
        service_url: ``pulsar://host:port`` (or ``http://``, ``pulsar+ssl://``, ...), or an
            ``AutoClusterFailover`` / ``ServiceInfoProvider`` of ``client`` (as the official
            takes ``pulsar``'s; this module exports neither, nor ``get_service_info``, as
            ``pulsar.asyncio``).
        kwargs: the options of the blocking ``client.Client`` (``authentication``,
            ``operation_timeout_seconds``, TLS, ...), as the official one takes
            ``pulsar.Client``'s.
    """

    def __init__(self, service_url: ServiceSource, **kwargs: Any) -> None:
        with translated():
            self._client = AsyncClient(service_url, **kwargs)
        self._state = ClientState()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shut_down = False
        # The background close shutdown() started, if it had connections to close.
        self._stopping: asyncio.Future[None] | concurrent.futures.Future[None] | None = None

    def _use(self) -> None:
        """Checks the client is open; remembers the loop it runs on (``shutdown`` needs it)."""
        self._state.check_open()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: PayloadEncoder | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: CryptoKeyReader | None = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Message, int], int] | None = None,
    ) -> Producer:
        """Create a producer on ``topic`` (a partitioned topic is routed by
        ``message_routing_mode`` / ``message_router``).

        Raises:
            ValueError: batching and chunking both enabled (batching is on by default here).
            PulsarException: ``TopicNotFound``, ``ProducerBusy``, ``Timeout``, ...
        """
        if batching_enabled and chunking_enabled:
            raise ValueError("Batching and chunking of messages can't be enabled together.")
        self._use()
        with translated():
            producer = await self._client.create_producer(
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
        return Producer(producer, self._state)

    async def subscribe(
        self,
        topic: str | list[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: CryptoKeyReader | None = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: object = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        is_pattern_topic: bool = False,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics, or (``is_pattern_topic``) the topics of one
        namespace a regex matches, such as ``"public/default/orders-.*"``.

        Raises:
            ValueError: a list with ``is_pattern_topic``, or a topic neither str nor list.
            PulsarException: ``ConsumerBusy``, ``OperationNotSupported``, ``Timeout``, ...
        """
        options = dict(locals())
        del options["self"], options["is_pattern_topic"]
        target: str | list[str] | re.Pattern[str]
        if isinstance(topic, str):
            target = re.compile(topic) if is_pattern_topic else topic
        elif isinstance(topic, list):
            if is_pattern_topic:
                raise ValueError(
                    "topic must be a str when is_pattern_topic is True: a list of topics "
                    "cannot be a pattern"
                )
            target = topic
        else:
            raise ValueError("topic must be a str or a list of str")
        options["topic"] = target
        self._use()
        with translated():
            passed = _passed_on(_SUBSCRIBE_TAKES, options, _SUBSCRIBE_DEFAULTS)
            consumer = await self._client.subscribe(**passed)
        return Consumer(consumer, self._state)

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: CryptoKeyReader | None = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """A reader of ``topic`` from ``start_message_id`` (``MessageId.earliest``,
        ``MessageId.latest`` or a message's id).

        Raises:
            ValueError: ``start_message_id`` is not a ``MessageId``.
            PulsarException: ``OperationNotSupported``, ``Timeout``, ...
        """
        if not isinstance(start_message_id, MessageId):
            raise ValueError(
                f"start_message_id must be a MessageId, not {type(start_message_id).__name__}"
            )
        options = dict(locals())
        del options["self"]
        self._use()
        with translated():
            passed = _passed_on(_READER_TAKES, options, _READER_DEFAULTS)
            reader = await self._client.create_reader(**passed)
        return Reader(reader, self._state)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic``, or ``[topic]`` (its full name) when not partitioned.

        Raises:
            ValueError: ``topic`` is not a str.
        """
        if not isinstance(topic, str):
            raise ValueError(f"topic must be a str, not {type(topic).__name__}")
        self._use()
        with translated():
            return await self._client.get_topic_partitions(topic)

    def shutdown(self) -> None:
        """Stop the client at once, without awaiting: every producer, consumer and reader it
        made refuses further work with ``AlreadyClosed``, sends still waiting fail with it, and
        ``AsyncClient.shutdown`` (pending messages given up, connections closed) runs in the
        background; ``close()`` afterwards waits for it.
        """
        if self._state.closed:
            return
        self._state.closed = True
        self._shut_down = True
        loop = self._loop
        if loop is None or loop.is_closed():
            self._client.close_provider()  # nothing was ever opened but a provider's thread
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            self._state.fail_waiting()
            task = loop.create_task(self._client.shutdown())
            task.add_done_callback(_log_failure)
            self._stopping = task
        elif loop.is_running():
            self._stopping = asyncio.run_coroutine_threadsafe(self._stop_from_loop(), loop)

    async def _stop_from_loop(self) -> None:
        self._state.fail_waiting()
        await self._client.shutdown()

    async def close(self) -> None:
        """Close every producer (delivering what is pending first), consumer and reader, then
        the connections.

        Raises:
            PulsarException: ``AlreadyClosed`` when closed before (after ``shutdown`` it waits
                for the connections to close instead, as the official client answers Ok).
        """
        if self._shut_down:
            if self._stopping is not None:
                with translated():
                    await asyncio.wrap_future(self._stopping)
            return
        if self._state.closed:
            raise PulsarException(Result.AlreadyClosed, "the client is already closed")
        self._state.closed = True
        with translated():
            await self._client.close()

    def __repr__(self) -> str:
        return f"<client.asyncio.Client {'closed' if self._state.closed else 'open'}>"


def _defaults(method: Callable[..., Coroutine[Any, Any, Any]]) -> dict[str, Any]:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(method).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


_SUBSCRIBE_DEFAULTS = _defaults(Client.subscribe)
_READER_DEFAULTS = _defaults(Client.create_reader)


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("closing the client after shutdown failed: %r", task.exception())
