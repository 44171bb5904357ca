"""The cluster a client talks to now, and the switch to another one.

A client is built on a ``ServiceInfo``: its service URL (hence the lookup transport), and the
credentials and trust store every connection uses. With a plain service URL it never changes
(the C++ client's ``DefaultServiceInfoProvider``). With a ``ServiceInfoProvider`` (or an
``AutoClusterFailover``, which the client turns into one) the provider may announce another,
from any thread; the client then does what the C++ ``ClientImpl::updateServiceInfo`` does:

1. ``get_service_info()`` answers the new one at once;
2. on the client's event loop: a new lookup for the new URL, the connection pool switched to
   the new settings, every open connection closed. Producers, consumers and readers see their
   connection close and reconnect as after any broker loss, looking their topic up again, now
   on the new cluster;
3. a lookup under way on the old cluster is abandoned and asked again of the new one (``ask``),
   so nothing keeps retrying a cluster that is gone until the operation timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from client.auth import Authentication
from client.config import ClientConfig
from client.connection import Connection
from client.connection_pool import ConnectionPool
from client.lookup import Lookup
from client.service_info.auto_failover import AutoClusterFailover, AutoFailoverProvider
from client.service_info.info import ServiceInfo, ServiceInfoProvider
from client.service_url import ServiceUrl

__all__ = ["ActiveService", "ServiceSource", "initial_service"]

logger = logging.getLogger(__name__)

R = TypeVar("R")
ServiceSource = str | AutoClusterFailover | ServiceInfoProvider
LookupFactory = Callable[[ConnectionPool, ServiceUrl, ClientConfig], Lookup]
ConfigFactory = Callable[[ServiceInfo], ClientConfig]


def initial_service(
    source: object,
    authentication: Authentication | None,
    tls_trust_certs_file_path: str | None,
) -> tuple[ServiceInfoProvider | None, ServiceInfo]:
    """The provider (None for a plain URL) and the first ``ServiceInfo`` of a client's
    ``service_url``, checked as the official ``Client`` checks it.

    Raises:
        ValueError: ``source`` is of another type; authentication or a trust store given to the
            client with a provider (they belong to each ``ServiceInfo``); a provider whose
            ``initial_service_info()`` is not a ``ServiceInfo``; a malformed URL.
    """
    if not isinstance(source, (str, AutoClusterFailover, ServiceInfoProvider)):
        raise ValueError(
            "Argument service_url is expected to be of type 'str', 'AutoClusterFailover' or "
            "'ServiceInfoProvider'"
        )
    if isinstance(source, str):
        return None, ServiceInfo(source, authentication, tls_trust_certs_file_path)
    for name, value in (
        ("authentication", authentication),
        ("tls_trust_certs_file_path", tls_trust_certs_file_path),
    ):
        if value is not None:
            raise ValueError(
                f"Argument {name} is not supported when service_url is an AutoClusterFailover "
                f"or ServiceInfoProvider; set {name} on each ServiceInfo instead"
            )
    provider = AutoFailoverProvider(source) if isinstance(source, AutoClusterFailover) else source
    info = provider.initial_service_info()
    if not isinstance(info, ServiceInfo):
        raise ValueError(
            f"initial_service_info() must return a ServiceInfo, not {type(info).__name__}"
        )
    return provider, info


@dataclass(eq=False, slots=True)
class _Service:
    """One cluster as the client uses it; ``retired`` resolves when the client leaves it."""

    info: ServiceInfo
    config: ClientConfig
    lookup: Lookup
    retired: asyncio.Future[None] | None = None


class ActiveService:
    """The cluster in use (settings and lookup) and the switch to another (see the module
    docstring). ``config_of`` makes a cluster's settings, ``lookup_of`` its lookup; ``pool``
    holds the client's connections."""

    def __init__(
        self,
        provider: ServiceInfoProvider | None,
        info: ServiceInfo,
        config_of: ConfigFactory,
        lookup_of: LookupFactory,
    ) -> None:
        self._provider = provider
        self._config_of = config_of
        self._lookup_of = lookup_of
        config = config_of(info)
        #: The client's connections (one pool for whichever cluster is in use).
        self.pool = ConnectionPool(config, info.service_url)
        self._current = _Service(info, config, lookup_of(self.pool, info.parsed_url, config))
        self._info = info
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._closed = False

    def start(self) -> None:
        """Let the provider announce changes (once the client is built, as the C++ client)."""
        if self._provider is not None:
            self._provider.initialize(self.update)

    @property
    def info(self) -> ServiceInfo:
        """The cluster announced last (the client moves to it on its loop right after)."""
        return self._info

    @property
    def config(self) -> ClientConfig:
        return self._current.config

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the client runs on (switches happen there)."""
        if self._loop is None:
            self._loop = loop

    # --- the provider's callback ----------------------------------------------------------

    def update(self, info: ServiceInfo) -> None:
        """Switch to ``info`` (the callback given to the provider; any thread).

        Raises:
            RuntimeError: ``info`` is not a ``ServiceInfo`` (as the official callback).
            OSError, ssl.SSLError: the new trust store or certificate cannot be read.
        """
        if not isinstance(info, ServiceInfo):
            raise RuntimeError(f"expected a ServiceInfo, not {type(info).__name__}")
        if self._closed:
            logger.error("the client is closed: not switching to %s", info.service_url)
            return
        config = self._config_of(info)  # reads TLS files: here, not on the event loop
        self._info = info
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is loop:
            self._switch(info, config, on_loop=True)
            return
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: as if never run
                loop.call_soon_threadsafe(self._switch, info, config, True)
                return
        self._switch(info, config, on_loop=False)  # no loop runs this client: nothing is open

    def _switch(self, info: ServiceInfo, config: ClientConfig, on_loop: bool) -> None:
        if self._closed:
            return
        old = self._current
        logger.info("switching from %s to %s", old.info.service_url, info.service_url)
        self._current = _Service(info, config, self._lookup_of(self.pool, info.parsed_url, config))
        if old.retired is not None and not old.retired.done():
            old.retired.set_result(None)
        stale = self.pool.switch(config, info.service_url)
        if on_loop:
            task = asyncio.get_running_loop().create_task(_retire(old.lookup, stale))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    # --- lookups --------------------------------------------------------------------------

    async def ask(self, call: Callable[[Lookup], Awaitable[R]]) -> R:
        """``call(lookup)`` on the cluster in use; asked again of the new cluster when the
        client switches while it is under way."""
        if self._provider is None:  # never switches: no watch needed
            return await call(self._current.lookup)
        while True:
            service = self._current
            if service.retired is None:
                service.retired = asyncio.get_running_loop().create_future()
            attempt = asyncio.ensure_future(call(service.lookup))
            try:
                await asyncio.wait((attempt, service.retired), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not attempt.done():
                    attempt.cancel()
            if not service.retired.done():
                return attempt.result()
            _drop(attempt)  # an answer about the old cluster: ask the new one

    # --- closing --------------------------------------------------------------------------

    def close_provider(self) -> None:
        """Close the provider and ignore its announcements from now on (the client closes it
        first, as the C++ client); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._provider is not None:
            try:
                self._provider.close()
            except Exception:  # the provider is the application's: its failure ends here
                logger.exception("closing the service info provider failed")

    async def close(self) -> None:
        """Finish the switches under way and close the lookup (after ``close_provider``)."""
        self.close_provider()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await self._current.lookup.close()


async def _retire(lookup: Lookup, connections: list[Connection]) -> None:
    await asyncio.gather(*(connection.close() for connection in connections))
    await lookup.close()


def _drop(attempt: asyncio.Future[R]) -> None:
    """Forget an abandoned attempt without an unretrieved-exception warning."""

    def retrieve(done: asyncio.Future[R]) -> None:
        if not done.cancelled():
            done.exception()

    if attempt.done():
        retrieve(attempt)
    else:
        attempt.add_done_callback(retrieve)
