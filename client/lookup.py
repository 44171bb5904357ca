"""Where a topic lives: LOOKUP (with redirects) and PARTITIONED_METADATA, retried with backoff.

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
from typing import TypeVar

from client.config import ClientConfig
from client.connection_pool import ConnectionPool
from client.errors import Disconnected, LookupError, PulsarException, Timeout
from client.service_url import Address, ServiceUrl, parse_address
from protocol import commands, pb

__all__ = ["MAX_REDIRECTS", "LookupResult", "LookupService"]

R = TypeVar("R")
MAX_REDIRECTS = 20
_Lookup = pb.CommandLookupTopicResponse


@dataclass(frozen=True, slots=True)
class LookupResult:
    """The broker owning a topic (``logical``) and where to open the socket (``physical``)."""

    logical: Address
    physical: Address


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
            broker = parse_address(response.brokerServiceUrl)
            physical = self.service_address if response.proxy_through_service_url else broker
            if response.response == _Lookup.Redirect:
                address, authoritative = physical, response.authoritative
                continue
            return LookupResult(broker, physical)
        raise LookupError(f"more than {MAX_REDIRECTS} redirects looking up {topic}")

    async def _retrying(self, attempt: Callable[[], Awaitable[R]], what: str) -> R:
        loop = asyncio.get_running_loop()
        timeout = self._config.operation_timeout
        backoff = self._config.new_backoff()
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
                            self._current = (self._current + 1) % len(self._addresses)
                    await asyncio.sleep(backoff.next())
        except TimeoutError:
            raise Timeout(f"{what} did not succeed within {timeout:g} s: {last}") from last
