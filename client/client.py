"""``AsyncClient``: the asyncio-native entry point (``Client`` in ``client.sync`` wraps it).

One client owns a connection pool (one socket per broker, shared by all its producers and
lookups), a lookup service and the producers it created. ``close()`` (or leaving
``async with``) closes the producers (each delivers what it has pending first, within the
operation timeout), then every connection, and returns when no socket is left.

A client belongs to the process and the event loop that first used it: after ``os.fork()`` the
child gets ``ClientUsedAfterFork`` from it and must create its own.

Its ``service_url`` may also be an ``AutoClusterFailover`` or a ``ServiceInfoProvider``: the
client then follows the cluster the provider announces (``client.service_info``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import os
import re
from collections.abc import Callable
from types import TracebackType

from client.arguments import check_number, check_type, check_type_or_none
from client.auth import Authentication
from client.config import ClientConfig
from client.connection import Connection
from client.connection_pool import ConnectionPool
from client.consumer import (
    AsyncConsumer,
    ConsumerConfig,
    PayloadSchema,
    ReaderOptions,
    SubscribeOptions,
)
from client.dead_letter import ConsumerDeadLetterPolicy, DeadLetterSender
from client.errors import (
    AlreadyClosed,
    ClientUsedAfterFork,
    InvalidConfiguration,
    InvalidTopicName,
)
from client.lookup import Lookup, LookupResult, LookupService
from client.message_id import MessageId
from client.multi_topic import AsyncMultiTopicConsumer
from client.partitioned_producer import AsyncPartitionedProducer
from client.process import current_pid
from client.producer import AsyncProducer, ProducerConfig, ProducerOptions
from client.reader import AsyncMultiTopicReader, AsyncReader
from client.routing import new_router
from client.service_info import ServiceInfo
from client.service_info.active import ActiveService, ServiceSource, initial_service
from client.service_url import ServiceUrl
from client.signatures import takes
from client.table_view import AsyncTableView
from client.tls import client_ssl_context
from protocol import InvalidTopicNameError, TopicName
from protocol.enums import TopicListMode

__all__ = ["AsyncClient", "new_lookup"]


class AsyncClient:
    """A client of one Pulsar service (Magnetar or Apache Pulsar).

    Args:
        service_url: ``pulsar://host:port`` (several hosts: ``pulsar://h1:p1,h2:p2``), or
            ``http://host:port`` to look topics up over the brokers' HTTP service; or an
            ``AutoClusterFailover`` or ``ServiceInfoProvider`` (``client.service_info``), whose
            ``ServiceInfo`` s then carry the authentication and trust store.
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
        io_threads, message_listener_threads, concurrent_lookup_requests,
        log_conf_file_path, stats_interval_in_seconds, logger: the official options that
            tune its C++ core: accepted and ignored (this client logs through ``logging``).

    Raises:
        ValueError: an argument of the wrong type (as the official client); ``authentication``
            or ``tls_trust_certs_file_path`` with a provider.
    """

    def __init__(
        self,
        service_url: ServiceSource,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50_000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: object = None,
        connection_timeout_ms: int = 10_000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        *,
        keep_alive_interval_seconds: float = 30,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 60_000,
        partitions_update_interval_seconds: float = 60,
    ) -> None:
        # The official parameters, in its order, checked as it checks them (ValueError); the
        # C++ core's tuning (threads, lookups in flight, logging, stats) is accepted and
        # ignored. Ours come after, by keyword only.
        provider, info = initial_service(service_url, authentication, tls_trust_certs_file_path)
        check_type_or_none(Authentication, authentication, "authentication")
        check_number(operation_timeout_seconds, "operation_timeout_seconds")
        check_number(connection_timeout_ms, "connection_timeout_ms")
        for name, value in (
            ("io_threads", io_threads),
            ("message_listener_threads", message_listener_threads),
            ("concurrent_lookup_requests", concurrent_lookup_requests),
            ("stats_interval_in_seconds", stats_interval_in_seconds),
        ):
            check_type(int, value, name)
        check_type_or_none(str, log_conf_file_path, "log_conf_file_path")
        for name, flag in (
            ("use_tls", use_tls),
            ("tls_allow_insecure_connection", tls_allow_insecure_connection),
            ("tls_validate_hostname", tls_validate_hostname),
        ):
            check_type(bool, flag, name)
        for name, path in (
            ("tls_trust_certs_file_path", tls_trust_certs_file_path),
            ("listener_name", listener_name),
            ("tls_private_key_file_path", tls_private_key_file_path),
            ("tls_certificate_file_path", tls_certificate_file_path),
        ):
            check_type_or_none(str, path, name)
        base = ClientConfig(
            operation_timeout=float(operation_timeout_seconds),
            connection_timeout=connection_timeout_ms / 1000,
            keep_alive_interval=float(keep_alive_interval_seconds),
            initial_backoff=initial_backoff_interval_ms / 1000,
            max_backoff=max_backoff_interval_ms / 1000,
            listener_name=listener_name,
            partitions_update_interval=float(partitions_update_interval_seconds),
        )
        config_of = functools.partial(
            _service_config,
            base,
            use_tls=use_tls,
            allow_insecure_connection=tls_allow_insecure_connection,
            validate_hostname=tls_validate_hostname,
            certificate=(tls_certificate_file_path, tls_private_key_file_path),
        )
        # The cluster in use: its settings, lookup and the connection pool (switched when a
        # provider announces another cluster).
        self._service = ActiveService(provider, info, config_of, new_lookup)
        self._pool = self._service.pool
        self._producers: set[AsyncProducer] = set()
        self._consumers: set[AsyncConsumer] = set()
        # Producers and consumers made of several (partitions, topic lists): closed first.
        self._composites: set[AsyncPartitionedProducer | AsyncMultiTopicConsumer] = set()
        self._ids = itertools.count()
        self._pid = current_pid()
        self._closed = False
        self._service.start()

    @property
    def config(self) -> ClientConfig:
        """The settings in use (authentication and TLS are those of the current cluster)."""
        return self._service.config

    def get_service_info(self) -> ServiceInfo:
        """The cluster this client uses now (the official ``Client.get_service_info``)."""
        return self._service.info

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

    @takes(ProducerOptions)
    async def create_producer(
        self, options: ProducerOptions
    ) -> AsyncProducer | AsyncPartitionedProducer:
        """Create a producer (the official ``create_producer`` arguments, same order: see
        ``ProducerOptions``).

        A partitioned topic gets an ``AsyncPartitionedProducer`` (see
        ``client.partitioned_producer``), routed by ``message_routing_mode`` /
        ``message_router`` (see ``client.routing``).

        Raises:
            InvalidTopicName: the topic name is not valid.
            Timeout, ProducerBusy, ProducerFenced, TopicNotFound, ...: creation failed.
        """
        self._check_open()
        full_name = _full_topic_name(options.topic)
        config = options.producer_config()
        partitions = await self._partitioned_metadata(full_name)
        if partitions == 0:
            return await self._start_producer(full_name, config)
        router = new_router(
            options.message_routing_mode,
            options.message_router,
            full_name,
            batching_enabled=options.batching_enabled,
            max_batch_messages=options.batching_max_messages,
            max_batch_bytes=options.batching_max_allowed_size_in_bytes,
            max_batch_delay_ms=options.batching_max_publish_delay_ms,
        )
        partitioned = AsyncPartitionedProducer(
            full_name,
            partitions,
            config,
            router,
            self._start_producer,
            self._partitioned_metadata,
            max_pending_across_partitions=options.max_pending_messages_across_partitions,
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

    @takes(SubscribeOptions)
    async def subscribe(self, options: SubscribeOptions) -> AsyncConsumer | AsyncMultiTopicConsumer:
        """Subscribe (the official ``subscribe`` names, same order: see ``SubscribeOptions``;
        keyword use advised).

        One topic gives an ``AsyncConsumer``; a list of topics, a pattern or a partitioned
        topic an ``AsyncMultiTopicConsumer`` (see ``client.multi_topic``).

        Raises:
            InvalidTopicName, OperationNotSupported, ConsumerBusy, Timeout, ...
        """
        self._check_open()
        config = options.consumer_config()
        dead_letter_policy = options.dead_letter_policy
        topic = options.topic
        name: str | None = None
        if isinstance(topic, str):
            name = _full_topic_name(topic)
            if await self._partitioned_metadata(name) == 0:
                return await self._start_consumer(name, config, dead_letter_policy)
            topic = [name]  # a partitioned topic: one consumer per partition, merged
        multi = AsyncMultiTopicConsumer(
            functools.partial(
                self._start_consumer, config=config, dead_letter_policy=dead_letter_policy
            ),
            options.subscription_name,
            options.receiver_queue_size,
            topics=[_full_topic_name(t) for t in topic] if isinstance(topic, list) else None,
            pattern=topic if isinstance(topic, re.Pattern) else None,
            list_topics=functools.partial(
                self.get_topics_of_namespace,
                mode=TopicListMode(int(options.regex_subscription_mode)),
            ),
            expand=self.get_topic_partitions,
            discovery_period=options.pattern_auto_discovery_period
            if isinstance(topic, re.Pattern)
            else self.config.partitions_update_interval,
            name=name,
            consumer_name=config.consumer_name,
            batch_receive_policy=config.batch_receive_policy,
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

    @takes(ReaderOptions)
    async def create_reader(self, options: ReaderOptions) -> AsyncReader | AsyncMultiTopicReader:
        """A reader from ``start_message_id`` (``MessageId.earliest``/``latest`` or an id; the
        official ``create_reader`` arguments, same order: see ``ReaderOptions``).

        On a partitioned topic the reader reads every partition (an ``AsyncMultiTopicReader``)
        and, as in the Java client, starts from ``earliest`` or ``latest`` only; to start one
        partition at an id, read that partition (``<topic>-partition-<i>``) on its own.

        Raises:
            InvalidConfiguration: another start id on a partitioned topic.
        """
        self._check_open()
        config = options.consumer_config(f"reader-{os.urandom(5).hex()}")
        start_message_id = options.start_message_id
        full_name = _full_topic_name(options.topic)
        if await self._partitioned_metadata(full_name) == 0:
            reader = AsyncReader(await self._start_consumer(full_name, config))
            try:
                await reader.include_head()
            except BaseException:
                await reader.close()
                raise
            return reader
        if start_message_id not in (MessageId.earliest, MessageId.latest):
            raise InvalidConfiguration(
                f"{full_name} is partitioned: a reader of it starts from earliest or latest "
                "(read one partition to start from a message id)"
            )
        multi = AsyncMultiTopicConsumer(
            functools.partial(self._start_consumer, config=config),
            config.subscription_name,
            options.receiver_queue_size,
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
        prepare: Callable[[AsyncConsumer], None] | None = None,
    ) -> AsyncConsumer:
        full_name = _full_topic_name(topic)
        dead_letter = None
        if dead_letter_policy is not None and DeadLetterSender.applies_to(config.consumer_type):
            dead_letter = DeadLetterSender(
                self, dead_letter_policy, full_name, config.subscription_name
            )
        consumer = AsyncConsumer(self, full_name, next(self._ids), config, dead_letter)
        if prepare is not None:  # before any frame comes (client.entry_reader's entry mode)
            prepare(consumer)
        self._consumers.add(consumer)
        await consumer.start()
        return consumer

    async def get_topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]:
        """The persistent topics of ``tenant/namespace`` (GET_TOPICS_OF_NAMESPACE)."""
        self._check_open()
        return await self._service.ask(lambda lookup: lookup.topics_of_namespace(namespace, mode))

    def consumer_closed(self, consumer: AsyncConsumer) -> None:
        self._consumers.discard(consumer)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition names of ``topic``, or ``[topic]`` when it is not partitioned."""
        self._check_open()
        full_name = _full_topic_name(topic)
        partitions = await self._partitioned_metadata(full_name)
        if partitions == 0:
            return [full_name]
        return [f"{full_name}-partition-{index}" for index in range(partitions)]

    async def _partitioned_metadata(self, topic: str) -> int:
        return await self._service.ask(lambda lookup: lookup.partitioned_metadata(topic))

    # --- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        """Close every producer, then every connection; idempotent."""
        if self._pid != current_pid():
            self._closed = True  # the parent's sockets are not ours to touch
            return
        if self._closed:
            return
        self._closed = True
        await self._close_all(deliver=True)

    async def shutdown(self) -> None:
        """Close at once, as the official ``shutdown``: producers give up what is pending
        (``AlreadyClosed``) instead of delivering it first; idempotent."""
        if self._pid != current_pid():
            self._closed = True
            return
        if self._closed:
            return
        self._closed = True
        await self._close_all(deliver=False)

    def close_provider(self) -> None:
        """Close the ``ServiceInfoProvider`` (``close`` and ``shutdown`` do it first): the
        client follows no other cluster from now on; idempotent."""
        self._service.close_provider()

    async def _close_all(self, *, deliver: bool) -> None:
        self._service.close_provider()  # first: no switch while closing
        composites = list(self._composites)
        await asyncio.gather(*(_close_quietly(composite) for composite in composites))
        producers = list(self._producers)
        consumers = list(self._consumers)
        await asyncio.gather(
            *(producer.close() if deliver else producer.shutdown() for producer in producers)
        )
        await asyncio.gather(*(consumer.close() for consumer in consumers))
        await self._service.close()
        await self._pool.close()

    @property
    def connections(self) -> list[Connection]:
        """Open connections (for statistics and tests)."""
        return self._pool.connections

    # --- what producers need (ProducerHost) ---------------------------------------------

    async def connection_for(self, topic: str) -> Connection:
        """A connection to the broker that owns ``topic`` (looked up every time)."""
        self._check_open()
        owner: LookupResult = await self._service.ask(lambda lookup: lookup.lookup(topic))
        return await self._pool.get(owner.logical, owner.physical)

    def producer_closed(self, producer: AsyncProducer) -> None:
        self._producers.discard(producer)

    def _check_open(self) -> None:
        # Called on the loop by every operation: switches of cluster run on this loop.
        self._service.bind(asyncio.get_running_loop())
        if self._pid != current_pid():
            raise ClientUsedAfterFork(
                f"this client was created in process {self._pid}, before os.fork(); "
                "create a new client in the child process"
            )
        if self._closed:
            raise AlreadyClosed("the client is closed")


def _service_config(
    base: ClientConfig,
    info: ServiceInfo,
    *,
    use_tls: bool,
    allow_insecure_connection: bool,
    validate_hostname: bool,
    certificate: tuple[str | None, str | None],
) -> ClientConfig:
    """The settings for one cluster: its credentials and trust store, the client's other TLS
    options (as the C++ client combines a ServiceInfo with its ClientConfiguration)."""
    ssl_context = None
    if use_tls or info.use_tls:
        ssl_context = client_ssl_context(
            trust_certs_file_path=info.tls_trust_certs_file_path,
            allow_insecure_connection=allow_insecure_connection,
            validate_hostname=validate_hostname,
            authentication=info.authentication,
            certificate=certificate,
        )
    return dataclasses.replace(base, authentication=info.authentication, ssl_context=ssl_context)


def new_lookup(pool: ConnectionPool, service_url: ServiceUrl, config: ClientConfig) -> Lookup:
    """The lookup transport the service URL asks for."""
    if service_url.http:
        from client.http_lookup import HttpLookupService  # aiohttp: loaded only when used

        return HttpLookupService(service_url, config)
    return LookupService(pool, service_url, config)


async def _close_quietly(closable: AsyncPartitionedProducer | AsyncMultiTopicConsumer) -> None:
    # One the application closed before: a second close raises AlreadyClosed, as the official.
    with contextlib.suppress(AlreadyClosed):
        await closable.close()


def _full_topic_name(topic: str) -> str:
    try:
        # non-persistent:// too (in-memory topics, issue #14).
        return TopicName.parse(topic, allow_non_persistent=True).full_name
    except InvalidTopicNameError as exc:
        raise InvalidTopicName(str(exc)) from None
