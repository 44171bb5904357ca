"""Lookups over the broker's HTTP service, for an ``http://host:port`` service URL.

What the official clients' ``HTTPLookupService`` asks:

* ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` answers Pulsar's ``LookupData``; its
  ``brokerUrl`` is the binary address to connect to. HTTP redirects (a broker that does not own
  the topic answers 307) are followed.
* ``GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions`` answers ``{"partitions": N}``.
* ``GET /admin/v2/namespaces/{tenant}/{ns}/topics?mode=PERSISTENT`` lists a namespace.

Failures map to the official exceptions: an unreachable host or a 5xx is retried with backoff
(the next host of the URL is tried), 404 is ``TopicNotFound``, 401/403 the authentication and
authorization errors, anything else ``LookupError`` with the broker's reason.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp

from client.config import ClientConfig
from client.errors import (
    AuthenticationError,
    AuthorizationError,
    Disconnected,
    LookupError,
    PulsarException,
    ServiceUnitNotReady,
    TopicNotFound,
)
from client.lookup import LookupResult, retrying
from client.service_url import ServiceUrl, parse_address
from protocol.enums import TopicListMode
from protocol.topic_name import TopicName

__all__ = ["HttpLookupService"]


class HttpLookupService:
    """``Lookup`` over HTTP (see the module docstring)."""

    def __init__(self, service_url: ServiceUrl, config: ClientConfig) -> None:
        self._addresses = service_url.addresses
        self._current = 0
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    async def lookup(self, topic: str) -> LookupResult:
        name = TopicName.parse(topic)
        answer = await self._get(f"/lookup/v2/topic/{_path(name)}", f"lookup of {topic}")
        broker_url = _broker_url(answer, tls=self._config.ssl_context is not None)
        if not isinstance(broker_url, str):
            raise LookupError(f"lookup of {topic}: no brokerUrl in {answer!r}")
        broker = parse_address(broker_url)
        return LookupResult(broker, broker)

    async def partitioned_metadata(self, topic: str) -> int:
        name = TopicName.parse(topic)
        answer = await self._get(
            f"/admin/v2/{_path(name)}/partitions?checkAllowAutoCreation=true",
            f"partitioned metadata of {topic}",
        )
        partitions = answer.get("partitions") if isinstance(answer, dict) else None
        if not isinstance(partitions, int) or partitions < 0:
            raise LookupError(f"partitioned metadata of {topic}: bad answer {answer!r}")
        return partitions

    async def topics_of_namespace(
        self, namespace: str, mode: TopicListMode = TopicListMode.PERSISTENT
    ) -> list[str]:
        tenant, _, local = namespace.partition("/")
        answer = await self._get(
            f"/admin/v2/namespaces/{quote(tenant, safe='')}/{quote(local, safe='')}/topics"
            f"?mode={mode.name}",
            f"topics of {namespace}",
        )
        if not isinstance(answer, list) or not all(isinstance(t, str) for t in answer):
            raise LookupError(f"topics of {namespace}: bad answer {answer!r}")
        return answer

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _get(self, path: str, what: str) -> Any:
        return await retrying(self._config, lambda: self._get_once(path), what, self._next_host)

    async def _get_once(self, path: str) -> Any:
        address = self._addresses[self._current]
        scheme = "https" if self._config.ssl_context is not None else "http"
        url = f"{scheme}://{address.host}:{address.port}{path}"
        auth = self._config.authentication
        if auth is not None:
            await auth.prepare()  # an OAuth2 token, fetched if stale
        header = auth.http_authorization() if auth is not None else None
        headers = {"Authorization": header} if header else None
        ssl_context = self._config.ssl_context or True  # True: aiohttp's default checks
        try:
            async with self._client().get(url, headers=headers, ssl=ssl_context) as reply:
                if reply.status == 200:
                    return await reply.json(content_type=None)
                reason = await _reason(reply)
        except aiohttp.ClientConnectionError as exc:
            raise Disconnected(f"GET {url}: {exc}") from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise LookupError(f"GET {url}: {exc}") from exc
        raise _error(reply.status, f"GET {url}: {reply.status} {reason}")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._config.operation_timeout),
                raise_for_status=False,
            )
        return self._session

    def _next_host(self) -> None:
        self._current = (self._current + 1) % len(self._addresses)


def _broker_url(answer: Any, *, tls: bool) -> Any:
    """``brokerUrlTls`` for a TLS client when the broker has one, else ``brokerUrl``."""
    if not isinstance(answer, dict):
        return None
    return (answer.get("brokerUrlTls") if tls else None) or answer.get("brokerUrl")


def _path(name: TopicName) -> str:
    """``{domain}/{tenant}/{ns}/{topic}`` with every part URL-encoded, as Pulsar's clients do."""
    parts = (name.domain, name.tenant, name.namespace, name.local_name)
    return "/".join(quote(part, safe="") for part in parts)


async def _reason(reply: aiohttp.ClientResponse) -> str:
    try:
        body = await reply.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return (await reply.text())[:200]
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return str(body["reason"])
    return str(body)[:200]


def _error(status: int, message: str) -> PulsarException:
    if status == 404:
        return TopicNotFound(message)
    if status == 401:
        return AuthenticationError(message)
    if status == 403:
        return AuthorizationError(message)
    if status >= 500:
        return ServiceUnitNotReady(message)  # retriable: the broker may come back
    return LookupError(message)
