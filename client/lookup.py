"""Where a topic lives: LOOKUP (with redirects) and PARTITIONED_METADATA, retried with backoff.

Two transports with one interface (``Lookup``): ``LookupService`` speaks the binary protocol
to a ``pulsar://`` service URL; ``client.http_lookup.HttpLookupService`` asks the HTTP service
of an ``http://`` one. ``client.client.new_lookup`` picks by the URL (it sits above both, so
that neither transport imports the other).

``lookup(topic)`` asks the service URL's broker, follows ``Redirect`` answers (carrying the
``authoritative`` flag, at most 20 hops) and returns the owner's address. With
``proxy_through_service_url`` the client keeps connecting to the service URL (the physical
address) and names the owner in CONNECT's ``proxy_to_broker_url`` (the logical address).

Both calls are retried as the C++ ``RetryableLookupService`` does: a retriable failure (the
broker is unreachable or not ready, ``errors.PulsarException.retriable``) is tried again after
a backoff until the operation timeout, which ends in ``Timeout``; any other failure is raised
at once. When a host of the service URL cannot be reached, the next one is used.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from client.config import ClientConfig
from client.connection_pool import ConnectionPool
from client.errors import Disconnected, LookupError, PulsarException, Timeout
from client.service_url import Address, ServiceUrl, parse_address
from protocol import commands, pb
from protocol.enums import TopicListMode

__all__ = ["MAX_REDIRECTS", "Lookup", "LookupResult", "LookupService", "retrying"]

R = TypeVar("R")
MAX_REDIRECTS = 20
_Lookup = pb.CommandLookupTopicResponse


@dataclass(frozen=True, slots=True)
class LookupResult:
    """The broker owning a topic (``logical``) and where to open the socket (``physical``)."""

    logical: Address
    physical: Address


class Lookup(Protocol):
    """What the client asks of a lookup transport."""

    async def lookup(self, topic: str) -> LookupResult: ...

    async def partitioned_metadata(self, topic: str) -> int: ...

    async def topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]: ...

    async def close(self) -> None: ...


class LookupService:
    """Binary-protocol lookups through the service URL's brokers."""

    def __init__(self, pool: ConnectionPool, service_url: ServiceUrl, config: ClientConfig) -> None:
        self._pool = pool
        self._addresses = service_url.addresses
        self._current = 0
        self._config = config

    @property
    def service_address(self) -> Address:
        """The service URL host in use (the next one is tried when it cannot be reached)."""
        return self._addresses[self._current]

    async def lookup(self, topic: str) -> LookupResult:
        """The owner of ``topic`` (a full name).

        Raises:
            Timeout: retriable failures until the operation timeout.
            PulsarException: a failure that retrying cannot mend (e.g. ``TopicNotFound``).
        """
        return await self._retrying(lambda: self._lookup_once(topic), f"lookup of {topic}")

    async def partitioned_metadata(self, topic: str) -> int:
        """Partitions of ``topic`` (0: not partitioned); failures as for ``lookup``."""

        async def ask() -> int:
            connection = await self._pool.get(self.service_address)
            answer = await connection.request(lambda rid: commands.partitioned_metadata(topic, rid))
            return answer.partitionMetadataResponse.partitions

        return await self._retrying(ask, f"partitioned metadata of {topic}")

    async def topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]:
        """The topics of ``tenant/namespace`` of the kinds ``mode`` asks for
        (GET_TOPICS_OF_NAMESPACE; ``RegexSubscriptionMode`` picks it)."""
        connection = await self._pool.get(self.service_address)
        answer = await connection.request(
            lambda rid: commands.get_topics_of_namespace(namespace, rid, mode=mode)
        )
        return list(answer.getTopicsOfNamespaceResponse.topics)

    async def close(self) -> None:
        """Nothing of its own: its connections belong to the client's pool."""

    async def _lookup_once(self, topic: str) -> LookupResult:
        address = self.service_address
        authoritative = False
        for _ in range(MAX_REDIRECTS):
            connection = await self._pool.get(address)
            answer = await connection.request(
                functools.partial(
                    commands.lookup,
                    topic,
                    authoritative=authoritative,
                    advertised_listener_name=self._config.listener_name,
                )
            )
            response = answer.lookupTopicResponse
            tls_url = response.brokerServiceUrlTls if self._config.ssl_context else ""
            broker = parse_address(tls_url or response.brokerServiceUrl)
            physical = self.service_address if response.proxy_through_service_url else broker
            if response.response == _Lookup.Redirect:
                address, authoritative = physical, response.authoritative
                continue
            return LookupResult(broker, physical)
        raise LookupError(f"more than {MAX_REDIRECTS} redirects looking up {topic}")

    async def _retrying(self, attempt: Callable[[], Awaitable[R]], what: str) -> R:
        return await retrying(self._config, attempt, what, self._next_host)

    def _next_host(self) -> None:
        self._current = (self._current + 1) % len(self._addresses)


async def retrying(
    config: ClientConfig,
    attempt: Callable[[], Awaitable[R]],
    what: str,
    on_disconnect: Callable[[], None],
) -> R:
    """Run ``attempt`` until it succeeds, retrying retriable failures with backoff until the
    operation timeout (then ``Timeout``); ``on_disconnect`` moves to the next host when one
    could not be reached."""
    loop = asyncio.get_running_loop()
    timeout = config.operation_timeout
    backoff = config.new_backoff()
    last: PulsarException | None = None
    try:
        async with asyncio.timeout_at(loop.time() + timeout):
            while True:
                try:
                    return await attempt()
                except PulsarException as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    if isinstance(exc, Disconnected):
                        on_disconnect()
                await asyncio.sleep(backoff.next())
    except TimeoutError:
        raise Timeout(f"{what} did not succeed within {timeout:g} s: {last}") from last
