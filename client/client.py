"""``AsyncClient``: the asyncio-native entry point (``Client`` in ``client.sync`` wraps it).

One client owns a connection pool (one socket per broker, shared by all its producers and
lookups), a lookup service and the producers it created. ``close()`` (or leaving
``async with``) closes the producers (each delivers what it has pending first, within the
operation timeout), then every connection, and returns when no socket is left.

A client belongs to the process and the event loop that first used it: after ``os.fork()`` the
child gets ``ClientUsedAfterFork`` from it and must create its own.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any, overload

from client.auth import Authentication
from client.config import ClientConfig
from client.connection import Connection
from client.connection_pool import ConnectionPool
from client.consumer import AsyncConsumer, ConsumerConfig, PayloadSchema
from client.dead_letter import ConsumerDeadLetterPolicy, DeadLetterSender
from client.errors import (
    AlreadyClosed,
    ClientUsedAfterFork,
    InvalidConfiguration,
    InvalidTopicName,
    OperationNotSupported,
)
from client.lookup import new_lookup
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer, RegexSubscriptionMode
from client.partitioned_producer import AsyncPartitionedProducer
from client.process import current_pid
from client.producer import AsyncProducer, PayloadEncoder, ProducerConfig
from client.reader import AsyncMultiTopicReader, AsyncReader
from client.routing import MessageRouter, PartitionsRoutingMode, new_router
from client.service_url import ServiceUrl
from client.table_view import AsyncTableView
from client.tls import client_ssl_context
from protocol import InvalidTopicNameError, TopicName
from protocol.enums import (
    CompressionType,
    InitialPosition,
    ProducerAccessMode,
    SubType,
    TopicListMode,
)

__all__ = ["AsyncClient"]

#: Options of the official ``pulsar.Client`` that tune its C++ core; accepted and ignored.
_CORE_TUNING_OPTIONS = frozenset(
    {
        "io_threads",
        "message_listener_threads",
        "concurrent_lookup_requests",
        "log_conf_file_path",
        "stats_interval_in_seconds",
        "logger",
    }
)


class AsyncClient:
    """A client of one Pulsar service (Magnetar or Apache Pulsar).

    Args:
        service_url: ``pulsar://host:port`` (several hosts: ``pulsar://h1:p1,h2:p2``), or
            ``http://host:port`` to look topics up over the brokers' HTTP service.
        operation_timeout_seconds: bound on lookups, producer creation and close.
        connection_timeout_ms: bound on opening one connection (TCP + handshake).
        keep_alive_interval_seconds: PING period; a silent connection is dropped after it.
        initial_backoff_interval_ms / max_backoff_interval_ms: reconnection delays.
        listener_name: the broker's advertised listener to use.
        partitions_update_interval_seconds: how often producers and consumers of partitioned
            topics look for added partitions (the C++ client's ``partitionsUpdateInterval``).
        authentication: ``AuthenticationToken`` (a token or a token supplier),
            ``AuthenticationBasic`` or ``AuthenticationTLS`` from ``client.auth``.
        use_tls: TLS with a ``pulsar://``/``http://`` URL (``pulsar+ssl://`` and ``https://``
            imply it); ``tls_trust_certs_file_path``, ``tls_allow_insecure_connection``,
            ``tls_validate_hostname``, ``tls_certificate_file_path`` /
            ``tls_private_key_file_path`` as in the official client (``client/tls.py``).
        official_options: other ``pulsar.Client`` options, which tune the C++ core
            (``io_threads``, ``logger``, ...): accepted and ignored.
    """

    def __init__(
        self,
        service_url: str,
        operation_timeout_seconds: float = 30,
        *,
        connection_timeout_ms: int = 10_000,
        keep_alive_interval_seconds: float = 30,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 60_000,
        listener_name: str | None = None,
        partitions_update_interval_seconds: float = 60,
        authentication: Authentication | None = None,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        **official_options: Any,
    ) -> None:
        unknown = set(official_options) - _CORE_TUNING_OPTIONS
        if unknown:
            raise TypeError(f"unexpected keyword arguments: {sorted(unknown)}")
        if authentication is not None and not isinstance(authentication, Authentication):
            raise OperationNotSupported(
                "authentication must come from client.auth (AuthenticationToken, "
                "AuthenticationBasic, AuthenticationTLS)"
            )
        self._service_url = ServiceUrl.parse(service_url)
        ssl_context = None
        if use_tls or self._service_url.tls:
            ssl_context = client_ssl_context(
                trust_certs_file_path=tls_trust_certs_file_path,
                allow_insecure_connection=tls_allow_insecure_connection,
                validate_hostname=tls_validate_hostname,
                authentication=authentication,
                certificate=(tls_certificate_file_path, tls_private_key_file_path),
            )
        self.config = ClientConfig(
            operation_timeout=float(operation_timeout_seconds),
            connection_timeout=connection_timeout_ms / 1000,
            keep_alive_interval=float(keep_alive_interval_seconds),
            initial_backoff=initial_backoff_interval_ms / 1000,
            max_backoff=max_backoff_interval_ms / 1000,
            listener_name=listener_name,
            partitions_update_interval=float(partitions_update_interval_seconds),
            authentication=authentication,
            ssl_context=ssl_context,
        )
        self._pool = ConnectionPool(self.config)
        self._lookup = new_lookup(self._pool, self._service_url, self.config)
        self._producers: set[AsyncProducer] = set()
        self._consumers: set[AsyncConsumer] = set()
        # Producers and consumers made of several (partitions, topic lists): closed first.
        self._composites: set[AsyncPartitionedProducer | AsyncMultiTopicConsumer] = set()
        self._ids = itertools.count()
        self._pid = current_pid()
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # --- producers ----------------------------------------------------------------------

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: PayloadEncoder | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30_000,
        compression_type: CompressionType | int = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50_000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode | int = (
            PartitionsRoutingMode.RoundRobinDistribution
        ),
        lazy_start_partitioned_producers: bool = False,
        properties: Mapping[str, str] | None = None,
        batching_type: object = None,
        encryption_key: str | None = None,
        crypto_key_reader: object = None,
        access_mode: ProducerAccessMode | int = ProducerAccessMode.Shared,
        message_router: MessageRouter | None = None,
    ) -> AsyncProducer | AsyncPartitionedProducer:
        """Create a producer (the official ``create_producer`` arguments, same order).

        A partitioned topic gets an ``AsyncPartitionedProducer`` (see
        ``client.partitioned_producer``), routed by ``message_routing_mode`` /
        ``message_router`` (see ``client.routing``). ``lazy_start_partitioned_producers`` and
        ``batching_type`` are accepted and ignored (every partition's producer starts at once;
        batches are not grouped by key).

        Raises:
            InvalidTopicName: the topic name is not valid.
            OperationNotSupported: encryption.
            Timeout, ProducerBusy, ProducerFenced, TopicNotFound, ...: creation failed.
        """
        self._check_open()
        if encryption_key is not None or crypto_key_reader is not None:
            raise OperationNotSupported("end-to-end encryption is not supported yet")
        full_name = _full_topic_name(topic)
        config = ProducerConfig(
            producer_name=producer_name,
            initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis,
            access_mode=ProducerAccessMode(int(access_mode)),
            max_pending_messages=max_pending_messages,
            block_if_queue_full=block_if_queue_full,
            properties=dict(properties or {}),
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            compression_type=CompressionType(int(compression_type)),
            chunking_enabled=chunking_enabled,
            schema=schema,
        )
        partitions = await self._lookup.partitioned_metadata(full_name)
        if partitions == 0:
            return await self._start_producer(full_name, config)
        router = new_router(
            message_routing_mode,
            message_router,
            full_name,
            batching_enabled=batching_enabled,
            max_batch_messages=batching_max_messages,
            max_batch_bytes=batching_max_allowed_size_in_bytes,
            max_batch_delay_ms=batching_max_publish_delay_ms,
        )
        partitioned = AsyncPartitionedProducer(
            full_name,
            partitions,
            config,
            router,
            self._start_producer,
            self._lookup.partitioned_metadata,
            max_pending_across_partitions=max_pending_messages_across_partitions,
            update_interval=self.config.partitions_update_interval,
        )
        self._composites.add(partitioned)
        try:
            await partitioned.start()
        except BaseException:
            self._composites.discard(partitioned)
            raise
        return partitioned

    async def _start_producer(self, full_name: str, config: ProducerConfig) -> AsyncProducer:
        producer = AsyncProducer(self, full_name, next(self._ids), config)
        self._producers.add(producer)
        try:
            await producer.start()
        except BaseException:
            self._producers.discard(producer)
            raise
        return producer

    # --- consumers and readers ----------------------------------------------------------

    @overload
    async def subscribe(
        self,
        topic: str,
        subscription_name: str,
        consumer_type: SubType | int = ...,
        schema: PayloadSchema | None = ...,
        receiver_queue_size: int = ...,
        consumer_name: str | None = ...,
        unacked_messages_timeout_ms: int = ...,
        negative_ack_redelivery_delay_ms: int = ...,
        properties: Mapping[str, str] | None = ...,
        initial_position: InitialPosition | int = ...,
        batch_index_ack_enabled: bool = ...,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = ...,
        pattern_auto_discovery_period: float = 60,
        is_read_compacted: bool = ...,
        regex_subscription_mode: RegexSubscriptionMode | int = ...,
    ) -> AsyncConsumer: ...

    @overload
    async def subscribe(
        self,
        topic: list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: SubType | int = ...,
        schema: PayloadSchema | None = ...,
        receiver_queue_size: int = ...,
        consumer_name: str | None = ...,
        unacked_messages_timeout_ms: int = ...,
        negative_ack_redelivery_delay_ms: int = ...,
        properties: Mapping[str, str] | None = ...,
        initial_position: InitialPosition | int = ...,
        batch_index_ack_enabled: bool = ...,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = ...,
        pattern_auto_discovery_period: float = 60,
        is_read_compacted: bool = ...,
        regex_subscription_mode: RegexSubscriptionMode | int = ...,
    ) -> AsyncMultiTopicConsumer: ...

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: SubType | int = SubType.Exclusive,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int = 0,
        negative_ack_redelivery_delay_ms: int = 60_000,
        properties: Mapping[str, str] | None = None,
        initial_position: InitialPosition | int = InitialPosition.Latest,
        batch_index_ack_enabled: bool = False,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        pattern_auto_discovery_period: float = 60,
        is_read_compacted: bool = False,
        regex_subscription_mode: RegexSubscriptionMode | int = RegexSubscriptionMode.PersistentOnly,
    ) -> AsyncConsumer | AsyncMultiTopicConsumer:
        """Subscribe (the official ``subscribe`` names; keyword use advised).

        ``topic``: one topic; a list of topics, or a compiled ``re.Pattern`` of full topic
        names in one namespace (re-checked every ``pattern_auto_discovery_period`` seconds),
        both giving an ``AsyncMultiTopicConsumer`` (see ``client.multi_topic``).
        ``dead_letter_policy``: see ``client.dead_letter`` (Shared and Key_Shared only).
        A partitioned topic gives an ``AsyncMultiTopicConsumer`` over its partitions.

        Raises:
            InvalidTopicName, OperationNotSupported, ConsumerBusy, Timeout, ...
        """
        self._check_open()
        config = ConsumerConfig(
            subscription_name=subscription_name,
            consumer_type=SubType(int(consumer_type)),
            initial_position=InitialPosition(int(initial_position)),
            receiver_queue_size=receiver_queue_size,
            consumer_name=consumer_name,
            properties=dict(properties or {}),
            schema=schema,
            batch_index_ack_enabled=batch_index_ack_enabled,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            read_compacted=is_read_compacted,
        )
        name: str | None = None
        if isinstance(topic, str):
            name = _full_topic_name(topic)
            if await self._lookup.partitioned_metadata(name) == 0:
                return await self._start_consumer(name, config, dead_letter_policy)
            topic = [name]  # a partitioned topic: one consumer per partition, merged
        multi = AsyncMultiTopicConsumer(
            functools.partial(
                self._start_consumer, config=config, dead_letter_policy=dead_letter_policy
            ),
            subscription_name,
            receiver_queue_size,
            topics=[_full_topic_name(t) for t in topic] if isinstance(topic, list) else None,
            pattern=topic if isinstance(topic, re.Pattern) else None,
            list_topics=functools.partial(
                self.get_topics_of_namespace,
                mode=TopicListMode(int(regex_subscription_mode)),
            ),
            expand=self.get_topic_partitions,
            discovery_period=pattern_auto_discovery_period
            if isinstance(topic, re.Pattern)
            else self.config.partitions_update_interval,
            name=name,
        )
        return await self._start_composite(multi)

    async def _start_composite(self, multi: AsyncMultiTopicConsumer) -> AsyncMultiTopicConsumer:
        self._composites.add(multi)
        try:
            await multi.start()
        except BaseException:
            self._composites.discard(multi)
            raise
        return multi

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        reader_name: str | None = None,
        schema: PayloadSchema | None = None,
        receiver_queue_size: int = 1000,
        start_message_id_inclusive: bool = False,
        is_read_compacted: bool = False,
    ) -> AsyncReader | AsyncMultiTopicReader:
        """A reader from ``start_message_id`` (``MessageId.earliest``/``latest`` or an id).

        On a partitioned topic the reader reads every partition (an ``AsyncMultiTopicReader``)
        and, as in the Java client, starts from ``earliest`` or ``latest`` only; to start one
        partition at an id, read that partition (``<topic>-partition-<i>``) on its own.

        Raises:
            InvalidConfiguration: another start id on a partitioned topic.
        """
        self._check_open()
        config = ConsumerConfig(
            subscription_name=f"reader-{os.urandom(5).hex()}",
            consumer_name=reader_name,
            receiver_queue_size=receiver_queue_size,
            schema=schema,
            durable=False,
            start_message_id=start_message_id,
            start_message_id_inclusive=start_message_id_inclusive,
            read_compacted=is_read_compacted,
        )
        full_name = _full_topic_name(topic)
        if await self._lookup.partitioned_metadata(full_name) == 0:
            return AsyncReader(await self._start_consumer(full_name, config))
        if start_message_id not in (MessageId.earliest, MessageId.latest):
            raise InvalidConfiguration(
                f"{full_name} is partitioned: a reader of it starts from earliest or latest "
                "(read one partition to start from a message id)"
            )
        multi = AsyncMultiTopicConsumer(
            functools.partial(self._start_consumer, config=config),
            config.subscription_name,
            receiver_queue_size,
            topics=[full_name],
            expand=self.get_topic_partitions,
            discovery_period=self.config.partitions_update_interval,
            name=full_name,
        )
        return AsyncMultiTopicReader(await self._start_composite(multi))

    async def create_table_view(
        self,
        topic: str,
        subscription_name: str | None = None,
        schema: PayloadSchema | None = None,
    ) -> AsyncTableView:
        """A ``TableView`` of ``topic`` (``client.table_view``; the official signature): a
        compacted reader's key -> latest value map, holding the topic's current state when
        returned. ``subscription_name`` names the reader (its consumer name)."""
        reader = await self.create_reader(
            topic,
            MessageId.earliest,
            reader_name=subscription_name,
            schema=schema,
            is_read_compacted=True,
        )
        try:
            return await AsyncTableView(reader, decode=schema is not None).start()
        except BaseException:
            await reader.close()
            raise

    async def _start_consumer(
        self,
        topic: str,
        config: ConsumerConfig,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
    ) -> AsyncConsumer:
        full_name = _full_topic_name(topic)
        dead_letter = None
        if dead_letter_policy is not None and DeadLetterSender.applies_to(config.consumer_type):
            dead_letter = DeadLetterSender(
                self, dead_letter_policy, full_name, config.subscription_name
            )
        consumer = AsyncConsumer(self, full_name, next(self._ids), config, dead_letter)
        self._consumers.add(consumer)
        await consumer.start()
        return consumer

    async def get_topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]:
        """The persistent topics of ``tenant/namespace`` (GET_TOPICS_OF_NAMESPACE)."""
        self._check_open()
        return await self._lookup.topics_of_namespace(namespace, mode)

    def consumer_closed(self, consumer: AsyncConsumer) -> None:
        self._consumers.discard(consumer)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition names of ``topic``, or ``[topic]`` when it is not partitioned."""
        self._check_open()
        full_name = _full_topic_name(topic)
        partitions = await self._lookup.partitioned_metadata(full_name)
        if partitions == 0:
            return [full_name]
        return [f"{full_name}-partition-{index}" for index in range(partitions)]

    # --- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        """Close every producer, then every connection; idempotent."""
        if self._pid != current_pid():
            self._closed = True  # the parent's sockets are not ours to touch
            return
        if self._closed:
            return
        self._closed = True
        composites = list(self._composites)
        await asyncio.gather(*(composite.close() for composite in composites))
        producers = list(self._producers)
        consumers = list(self._consumers)
        await asyncio.gather(*(producer.close() for producer in producers))
        await asyncio.gather(*(consumer.close() for consumer in consumers))
        await self._lookup.close()
        await self._pool.close()

    @property
    def connections(self) -> list[Connection]:
        """Open connections (for statistics and tests)."""
        return self._pool.connections

    # --- what producers need (ProducerHost) ---------------------------------------------

    async def connection_for(self, topic: str) -> Connection:
        """A connection to the broker that owns ``topic`` (looked up every time)."""
        self._check_open()
        owner = await self._lookup.lookup(topic)
        return await self._pool.get(owner.logical, owner.physical)

    def producer_closed(self, producer: AsyncProducer) -> None:
        self._producers.discard(producer)

    def _check_open(self) -> None:
        if self._pid != current_pid():
            raise ClientUsedAfterFork(
                f"this client was created in process {self._pid}, before os.fork(); "
                "create a new client in the child process"
            )
        if self._closed:
            raise AlreadyClosed("the client is closed")


def _full_topic_name(topic: str) -> str:
    try:
        # non-persistent:// too (in-memory topics, issue #14).
        return TopicName.parse(topic, allow_non_persistent=True).full_name
    except InvalidTopicNameError as exc:
        raise InvalidTopicName(str(exc)) from None
