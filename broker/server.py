"""Broker process: lifecycle (uvicorn style), the topic registry and the service facade.

``Broker.start()`` binds the binary and HTTP ports, ``Broker.shutdown()`` drains: it stops
accepting, closes every topic (flushing the ledger, snapshotting dedup, persisting cursors), then
closes the client connections, all bounded by ``brokerShutdownTimeoutMs``. ``run_standalone`` adds
the signal handling (SIGTERM/SIGINT) and is what ``magnetar standalone`` runs.

Topic loads are serialized per topic name (one ``asyncio.Lock`` each): recovery, including the
PIP-6 dedup replay, runs exactly once per load (Pulsar #25954) and before any producer is admitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from pathlib import Path
from urllib.parse import quote, unquote

from broker.config import BrokerConfig
from broker.connection import ServerConnection
from broker.dedup import MessageDeduplication
from broker.dedup_recovery import dedup_config_from, open_ledger_for_dedup, recover_dedup
from broker.errors import ServiceNotReady, TopicNotFound
from broker.metadata_store import PolicyStore, SchemaStore
from broker.storage import FileLayer, Ledger, LedgerConfig, Position
from broker.topic import Topic, ledger_config_from
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)


def topic_directory(data_path: Path, topic: TopicName) -> Path:
    """``<dataDir>/persistent/<tenant>/<ns>/<topic>``; the local name is %-encoded."""
    return (
        data_path / "persistent" / topic.tenant / topic.namespace / quote(topic.local_name, safe="")
    )


class BrokerService:
    """What connections and the admin API share: config, topics, policies, schemas."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_path = config.data_path
        self.data_path.mkdir(parents=True, exist_ok=True)
        metadata_dir = self.data_path / "metadata"
        self.policies = PolicyStore(metadata_dir)
        self.schemas = SchemaStore(metadata_dir)
        self.connections: set[ServerConnection] = set()
        self.topics: dict[str, Topic] = {}
        self._load_locks: dict[str, asyncio.Lock] = {}
        self._producer_counter = 0
        # Unique across restarts: generated producer names are dedup keys (PIP-6).
        self._instance = format(int(time.time() * 1000), "x")
        self.service_url = ""
        self.web_url = ""
        self.closing = False
        #: Test seam: the storage file layer (fault injection, simulated power loss).
        self.file_layer: FileLayer | None = None

    # ------------------------------------------------------------------ names

    def generate_producer_name(self) -> str:
        self._producer_counter += 1
        return f"{self.config.cluster_name}-{self._instance}-{self._producer_counter}"

    def check_namespace(self, topic: TopicName) -> None:
        namespace = topic.namespace_name
        if not self.policies.has_namespace(namespace):
            raise TopicNotFound(f"Tenant or namespace or topic does not exist: {namespace}")

    def partitions_of(self, topic: TopicName) -> int:
        self.check_namespace(topic)
        return 0

    def topics_of_namespace(self, namespace: str) -> list[str]:
        names = set(self.topics)
        tenant, _, ns = namespace.partition("/")
        directory = self.data_path / "persistent" / tenant / ns
        if directory.is_dir():
            for child in directory.iterdir():
                if child.is_dir():
                    names.add(f"persistent://{tenant}/{ns}/{unquote(child.name)}")
        prefix = f"persistent://{namespace}/"
        return sorted(n for n in names if n.startswith(prefix))

    # ------------------------------------------------------------------ topics

    def dedup_enabled_for(self, topic: TopicName) -> bool:
        return self.policies.dedup_enabled(
            topic.full_name, topic.namespace_name, self.config.broker_deduplication_enabled
        )

    async def get_topic(self, name: TopicName, *, create: bool) -> Topic:
        """The loaded topic, loading (and maybe creating) it first."""
        if self.closing:
            raise ServiceNotReady("Broker is shutting down")
        key = name.full_name
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        lock = self._load_locks.setdefault(key, asyncio.Lock())
        async with lock:
            topic = self.topics.get(key)
            if topic is not None:
                return topic
            self.check_namespace(name)
            directory = topic_directory(self.data_path, name)
            if not directory.exists() and not (create and self.config.allow_auto_topic_creation):
                raise TopicNotFound(f"Topic {key} does not exist")
            topic = await self._load(name, directory)
            self.topics[key] = topic
            return topic

    async def _load(self, name: TopicName, directory: Path) -> Topic:
        started = time.monotonic()
        dedup_on = self.dedup_enabled_for(name)
        ledger, dedup = await asyncio.to_thread(self._load_sync, directory, dedup_on)
        topic = Topic(name, ledger, self.config, dedup=dedup)
        log.info(
            "loaded topic %s in %.3f s (dedup %s)",
            name.full_name,
            time.monotonic() - started,
            "on" if dedup_on else "off",
        )
        return topic

    def _load_sync(
        self, directory: Path, dedup_on: bool
    ) -> tuple[Ledger, MessageDeduplication[Position] | None]:
        ledger_config = ledger_config_from(self.config)
        ledger, snapshot_damaged = open_ledger_for_dedup(directory, ledger_config, self.file_layer)
        try:
            dedup = (
                recover_dedup(ledger, dedup_config_from(self.config), full_replay=snapshot_damaged)
                if dedup_on
                else None
            )
            if not dedup_on and "pulsar.dedup" in ledger.cursors:
                ledger.delete_cursor("pulsar.dedup")
        except BaseException:
            ledger.close()
            raise
        return ledger, dedup

    def loaded_topic(self, name: TopicName) -> Topic | None:
        return self.topics.get(name.full_name)

    def topic_exists(self, name: TopicName) -> bool:
        return name.full_name in self.topics or topic_directory(self.data_path, name).exists()

    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic. Holding its load lock keeps a reconnecting client from opening
        the same ledger directory while the old instance is still closing."""
        key = name.full_name
        lock = self._load_locks.setdefault(key, asyncio.Lock())
        async with lock:
            topic = self.topics.pop(key, None)
            if topic is not None:
                await topic.close()

    async def delete_topic(self, name: TopicName) -> None:
        await self.unload_topic(name)
        directory = topic_directory(self.data_path, name)
        if directory.exists():
            await asyncio.to_thread(_delete_ledger, directory, ledger_config_from(self.config))
        self.schemas.delete(name.full_name)

    async def close_topics(self) -> None:
        topics = list(self.topics.values())
        self.topics.clear()
        results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", topic.name.full_name, result)


def _delete_ledger(directory: Path, config: LedgerConfig) -> None:
    Ledger.open(directory, config).delete()


class Broker:
    """The running broker: binary protocol server + HTTP admin server."""

    def __init__(self, config: BrokerConfig, *, file_layer: FileLayer | None = None) -> None:
        self.config = config
        self.file_layer = file_layer
        self.service: BrokerService | None = None
        self._server: asyncio.Server | None = None
        self._web: object | None = None
        self.port = 0
        self.web_port = 0

    async def start(self) -> None:
        from broker.web import start_web_server  # aiohttp is only needed once serving

        service = BrokerService(self.config)
        service.file_layer = self.file_layer
        self.service = service
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(service),
            host=self.config.bind_address,
            port=self.config.broker_service_port,
            reuse_address=True,
            backlog=1024,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        service.service_url = f"pulsar://{self.config.advertised_address}:{self.port}"
        self._web, self.web_port = await start_web_server(self, service)
        service.web_url = f"http://{self.config.advertised_address}:{self.web_port}"
        log.info(
            "Magnetar broker serving pulsar://%s:%d and http://%s:%d (data in %s)",
            self.config.bind_address,
            self.port,
            self.config.bind_address,
            self.web_port,
            self.service.data_path,
        )

    async def shutdown(self) -> None:
        """Stop accepting, flush and persist every topic, close connections; bounded."""
        service = self.service
        if service is None:
            return
        service.closing = True
        if self._server is not None:
            self._server.close()
        timeout = self.config.shutdown_timeout_seconds
        try:
            await asyncio.wait_for(service.close_topics(), timeout=timeout)
        except TimeoutError:
            log.error("shutdown: topics did not close within %.1f s", timeout)
        for connection in list(service.connections):
            connection.close()
        # A peer that stopped reading keeps its socket open with unsent data: abort it.
        pending = [asyncio.ensure_future(c.wait_closed()) for c in service.connections]
        if pending:
            _, still_open = await asyncio.wait(pending, timeout=1.0)
            for waiter in still_open:
                waiter.cancel()
        aborted = list(service.connections)
        for connection in aborted:
            connection.abort()
        if aborted:
            # Let the transports report connection_lost before the loop may close.
            waiters = [asyncio.ensure_future(c.wait_closed()) for c in aborted]
            _, late = await asyncio.wait(waiters, timeout=1.0)
            for waiter in late:
                waiter.cancel()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
        from broker.web import stop_web_server

        await stop_web_server(self._web)
        self.service = None
        log.info("Magnetar broker stopped")


async def run_standalone(config: BrokerConfig) -> None:
    """Serve until SIGTERM or SIGINT, then drain (``magnetar standalone``)."""
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
        log.info("signal received, draining")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await broker.shutdown()
