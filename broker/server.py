"""Broker process: its lifecycle, in the way uvicorn's ``Server`` reads.

``Broker.start()`` makes the ``BrokerService`` (``broker/service.py``: the topic registry) and
binds the binary and HTTP ports; ``Broker.shutdown()`` drains: it stops accepting, closes every
topic (flushing the ledger, snapshotting dedup, persisting cursors), then closes the client
connections, all bounded by ``brokerShutdownTimeoutMs``. ``run_standalone`` adds the signal
handling (SIGTERM/SIGINT) and is what ``magnetar standalone`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from broker.cluster.metadata import ClusterMetadata, open_cluster_metadata
from broker.cluster.service import start_cluster
from broker.cluster.store import etcd_store_for
from broker.config import BrokerConfig
from broker.connection.core import ServerConnection
from broker.gc_policy import apply_gc_policy
from broker.service import BrokerService
from broker.storage import FileLayer
from broker.tls import server_ssl_context
from broker.topics.message_expiry import run_message_expiry

log = logging.getLogger(__name__)


class Broker:
    """The running broker: binary protocol server + HTTP admin server."""

    def __init__(self, config: BrokerConfig, *, file_layer: FileLayer | None = None) -> None:
        self.config = config
        self.file_layer = file_layer
        self.service: BrokerService | None = None
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self._web: object | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._metadata: ClusterMetadata | None = None
        self.port = 0
        self.web_port = 0
        self.tls_port = 0
        self.web_tls_port = 0

    async def start(self) -> None:
        from broker.web import start_web_server  # aiohttp is only needed once serving

        if self.config.metadata_store_url:
            # Cluster mode: admin metadata lives in etcd; read it before serving anything.
            self._metadata = await open_cluster_metadata(self.config, etcd_store_for(self.config))
        service = BrokerService(self.config, self._metadata)
        service.file_layer = self.file_layer
        self.service = service
        loop = asyncio.get_running_loop()
        host = self.config.advertised_address
        if self.config.broker_service_port_enabled:
            self._server = await loop.create_server(
                lambda: ServerConnection(service),
                host=self.config.bind_address,
                port=self.config.broker_service_port,
                reuse_address=True,
                backlog=1024,
            )
            self.port = self._server.sockets[0].getsockname()[1]
            service.service_url = f"pulsar://{host}:{self.port}"
        if self.config.broker_service_port_tls >= 0:
            self._tls_server = await loop.create_server(
                lambda: ServerConnection(service),
                host=self.config.bind_address,
                port=self.config.broker_service_port_tls,
                reuse_address=True,
                backlog=1024,
                ssl=server_ssl_context(self.config),
            )
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
            service.service_url_tls = f"pulsar+ssl://{host}:{self.tls_port}"
        self._web, self.web_port, self.web_tls_port = await start_web_server(self.config, service)
        if self.web_port:
            service.web_url = f"http://{host}:{self.web_port}"
        if self.web_tls_port:
            service.web_url_tls = f"https://{host}:{self.web_tls_port}"
        if self.config.metadata_store_url:
            service.cluster = await start_cluster(self.config, service)
        self._expiry = asyncio.create_task(
            run_message_expiry(service.topics, service.topic_policies), name="message expiry"
        )
        # "serving pulsar://host:port and http://host:port" is parsed by tools and tests.
        bind = self.config.bind_address
        listeners = [
            f"pulsar://{bind}:{self.port}" if self._server is not None else "",
            f"http://{bind}:{self.web_port}" if self.web_port else "",
            f"pulsar+ssl://{bind}:{self.tls_port}" if self._tls_server is not None else "",
            f"https://{bind}:{self.web_tls_port}" if self.web_tls_port else "",
        ]
        log.info(
            "Magnetar broker serving %s (data in %s; authentication %s, authorization %s)",
            " and ".join(url for url in listeners if url),
            self.service.data_path,
            "on" if self.config.authentication_enabled else "off",
            "on" if self.config.authorization_enabled else "off",
        )

    async def shutdown(self) -> None:
        """Stop accepting, flush and persist every topic, close connections; bounded."""
        service = self.service
        if service is None:
            return
        if service.cluster is not None:
            # Close our bundles' topics cleanly and give them up, so others take over at once.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    service.cluster.close(), self.config.shutdown_timeout_seconds
                )
        service.closing = True
        if self._expiry is not None:
            self._expiry.cancel()
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
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
        for server in (self._server, self._tls_server):
            if server is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), timeout=1.0)
        from broker.web import stop_web_server

        await stop_web_server(self._web)
        if self._metadata is not None:
            await self._metadata.close()
            self._metadata = None
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
    # This process is the broker's alone: freeze the start-up objects and make collections rarer,
    # so no full collection stops the loop for tens of ms mid-flood (broker/gc_policy.py).
    apply_gc_policy()
    try:
        await stop.wait()
        log.info("signal received, draining")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await broker.shutdown()
