"""``Client``: the blocking client (``pulsar.Client``'s API), safe to share between threads.

A ``Client`` runs one event loop on a background thread (uvloop when installed) and an
``AsyncClient`` on it; every blocking call hands its work to that loop and waits
(``client.sync.runner``). Its methods take exactly the parameters of ``AsyncClient``'s
(``client.signatures``): the option dataclasses both are made from, plus the listener the
official ``subscribe`` and ``create_reader`` take.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from client.client import AsyncClient
from client.consumer import ConsumerType, ReaderOptions, SubscribeOptions
from client.multi_topic import AsyncMultiTopicConsumer
from client.producer import AsyncProducer, ProducerOptions
from client.service_info import ServiceInfo
from client.signatures import arguments_of, same_parameters, takes
from client.sync.consumer import BlockingSubscribeOptions, Consumer
from client.sync.multi_topic_consumer import MultiTopicConsumer
from client.sync.producer import Producer
from client.sync.reader import BlockingReaderOptions, Reader
from client.sync.runner import Runner
from client.sync.table_view import TableView

__all__ = ["Client"]


class Client:
    """Blocking client (``pulsar.Client``'s API); safe to share between threads.

    Takes the same arguments as ``AsyncClient`` (``service_url`` may be an
    ``AutoClusterFailover`` or a ``ServiceInfoProvider``).
    """

    @same_parameters(AsyncClient.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._async = AsyncClient(*args, **kwargs)
        self._runner = Runner(self._async.config.operation_timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @takes(ProducerOptions)
    def create_producer(self, options: ProducerOptions) -> Producer:
        """Create a producer; see ``AsyncClient.create_producer``."""
        producer = self._runner.run(
            self._async.create_producer(**arguments_of(options, ProducerOptions))
        )
        slots = (
            options.max_pending_messages
            if isinstance(producer, AsyncProducer)
            else min(
                options.max_pending_messages * producer.partitions(),
                options.max_pending_messages_across_partitions,
            )
        )
        return Producer(self._runner, producer, options.schema, slots, options.block_if_queue_full)

    # The official order: the listener right after the schema.
    @takes(BlockingSubscribeOptions, placed={"message_listener": 4})
    def subscribe(self, options: BlockingSubscribeOptions) -> Consumer:
        """Subscribe; see ``AsyncClient.subscribe``.

        ``message_listener``: ``listener(consumer, message)`` is called for each message on a
        thread of this consumer's own (``client.sync.listener``); ``receive`` is then refused.
        """
        consumer = self._runner.run(
            self._async.subscribe(**arguments_of(options, SubscribeOptions))
        )
        shared = int(options.consumer_type) in (ConsumerType.Shared, ConsumerType.Key_Shared)
        if isinstance(consumer, AsyncMultiTopicConsumer):
            return MultiTopicConsumer(
                self._runner, consumer, options.message_listener, shared=shared
            )
        return Consumer(self._runner, consumer, options.message_listener, shared=shared)

    @takes(BlockingReaderOptions, placed={"reader_listener": 3})
    def create_reader(self, options: BlockingReaderOptions) -> Reader:
        """Create a reader; see ``AsyncClient.create_reader``. ``reader_listener``: as the
        consumer's ``message_listener``, called as ``listener(reader, message)``."""
        reader = self._runner.run(self._async.create_reader(**arguments_of(options, ReaderOptions)))
        return Reader(self._runner, reader, options.reader_listener)

    @same_parameters(AsyncClient.create_table_view)
    def create_table_view(self, *args: Any, **kwargs: Any) -> TableView:
        """A ``TableView`` of ``topic`` (see ``client.table_view``), ready when returned."""
        view = self._runner.run(self._async.create_table_view(*args, **kwargs))
        return TableView(self._runner, view)

    @same_parameters(AsyncClient.get_topic_partitions)
    def get_topic_partitions(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._runner.run(self._async.get_topic_partitions(*args, **kwargs))

    @same_parameters(AsyncClient.get_topics_of_namespace)
    def get_topics_of_namespace(self, *args: Any, **kwargs: Any) -> list[str]:
        """The topics of ``tenant/namespace`` (partitions by their ``-partition-N`` names)."""
        return self._runner.run(self._async.get_topics_of_namespace(*args, **kwargs))

    def get_service_info(self) -> ServiceInfo:
        """The cluster this client uses now: the service URL given, or the ``ServiceInfo`` its
        ``AutoClusterFailover`` / ``ServiceInfoProvider`` announced last."""
        return self._async.get_service_info()

    def close(self) -> None:
        """Close producers and connections, then stop the loop thread; idempotent.

        In a process forked from the one that created the client, this only marks it closed.
        """
        self._runner.close(self._async.close)

    def shutdown(self) -> None:
        """Close at once (the official ``shutdown``): what producers have pending fails with
        ``AlreadyClosed`` instead of being delivered first; then stop the loop thread."""
        self._runner.close(self._async.shutdown)

    @property
    def async_client(self) -> AsyncClient:
        """The ``AsyncClient`` underneath (use it only from the loop thread)."""
        return self._async

    @property
    def loop_thread(self) -> threading.Thread:
        return self._runner.loop_thread.thread
