"""``EtcdStore``: the few etcd v3 operations cluster mode needs, over the ``aetcd`` client.

Every other module of ``broker.cluster`` talks to this class only, so the client library (which
ships no type hints) is confined here and in ``etcd_client.py`` (its TLS channel). TLS and
credentials come from ``metadataStoreConfigPath`` (``etcd_config.py``); a token etcd no longer
accepts is renewed once and the call made again (``_call``). Keys and values are ``str`` /
``bytes`` as etcd keeps them; the ownership epoch is the key's ``create_revision``, which etcd
makes unique and increasing across the whole store: a later owner of a bundle always has a
larger epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from broker.cluster.etcd_config import (
    FILE_KEY,
    Endpoint,
    EtcdOptions,
    load_etcd_options,
    parse_metadata_store_url,
)
from broker.config import ConfigError
from broker.metadata.mirror import Versioned

if TYPE_CHECKING:
    from broker.config import BrokerConfig

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A key read once at connect time: it proves that TLS and the credentials work (a user granted
#: only Magnetar's prefix may read it). Plain-text channels connect lazily, so without this a
#: wrong CA or an unauthenticated etcd would surface as failures of the first real call.
_PROBE_KEY = b"/magnetar/"


@dataclass(frozen=True, slots=True)
class Entry:
    """One key as read: its value and the revision that created it (the ownership epoch)."""

    key: str
    value: bytes
    create_revision: int
    lease: int


class EtcdStore:
    """One connection to etcd (the first endpoint; see docs/CLUSTER.md for the limits), over
    TLS and authenticated as ``options`` say."""

    def __init__(
        self, url: str, timeout_seconds: float, options: EtcdOptions | None = None
    ) -> None:
        # Imported here: aetcd pulls in grpc (~23 MiB of RSS), which a standalone broker
        # (the default) must not pay for.
        from broker.cluster.etcd_client import EtcdClient

        self._options = options or EtcdOptions()
        self._endpoint = parse_metadata_store_url(url, self._options)[0]
        self._timeout = timeout_seconds
        self._client: Any = EtcdClient(self._endpoint, self._options, timeout_seconds)
        self._renewing = asyncio.Lock()

    async def connect(self) -> None:
        """Connect and make one call, so that a refused certificate or password stops the
        broker at start with a ``ConfigError`` saying which, rather than failing later."""
        from aetcd import exceptions

        try:
            await self._client.connect()
            await self._call(lambda client: client.get(_PROBE_KEY))
        except (exceptions.UnauthenticatedError, exceptions.InvalidArgumentError) as exc:
            # etcd answers a wrong password and a call without a token "invalid argument"
            raise _refused(self._endpoint, self._options, exc) from exc
        except exceptions.ConnectionFailedError as exc:
            if self._endpoint.tls and _looks_like_tls(str(exc)):
                raise _refused(self._endpoint, self._options, exc) from exc
            raise

    async def close(self) -> None:
        await self._client.close()

    async def _call(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        """``operation(client)``; once more with a new token if etcd refused ours: it forgot
        it (restarted, token expired, the user's password changed) or the token predates a
        change of etcd's users or roles ("revision of auth store is old"). The user and
        password are still good, so a new token is all it takes (as jetcd does)."""
        from aetcd import exceptions

        token = self._client.token
        try:
            return await operation(self._client)
        except (exceptions.UnauthenticatedError, exceptions.InvalidArgumentError) as exc:
            if not self._options.user or not _stale_token(exc):
                raise
            reason = str(exc)
        async with self._renewing:
            if self._client.token is token:  # not renewed meanwhile by another call
                await self._client.renew_token()
                log.info("etcd: token refused (%s); authenticated again", reason)
        return await operation(self._client)

    # -- leases --------------------------------------------------------------------------------

    async def grant_lease(self, ttl_seconds: int) -> int:
        lease = await self._call(lambda client: client.lease(ttl_seconds))
        return int(lease.id)

    async def keep_alive(self, lease_id: int) -> int:
        """Refresh the lease; its remaining TTL in seconds, <= 0 when it has expired."""
        reply = await self._call(lambda client: client.refresh_lease(lease_id))
        return -1 if reply is None else int(reply.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call(lambda client: client.revoke_lease(lease_id))

    # -- keys ----------------------------------------------------------------------------------

    async def put(self, key: str, value: bytes, lease_id: int) -> None:
        await self._call(lambda client: client.put(key.encode(), value, lease=lease_id))

    async def get(self, key: str) -> Entry | None:
        result = await self._call(lambda client: client.get(key.encode()))
        return None if result is None else _entry(result)

    async def get_prefix(self, prefix: str) -> list[Entry]:
        result = await self._call(lambda client: client.get_prefix(prefix.encode()))
        return [_entry(kv) for kv in result]

    async def delete(self, key: str) -> None:
        await self._call(lambda client: client.delete(key.encode()))

    async def create_guarded(
        self, key: str, value: bytes, lease_id: int, guard: str, guard_revision: int
    ) -> bool:
        """Put ``key`` only if it does not exist and ``guard`` was last changed at
        ``guard_revision`` (0: ``guard`` does not exist), in one transaction."""
        txn = self._client.transactions
        return await self._transaction(
            [txn.create(key.encode()) == 0, txn.mod(guard.encode()) == guard_revision],
            [txn.put(key.encode(), value, lease=lease_id)],
        )

    async def delete_if_created_at(self, key: str, create_revision: int) -> bool:
        """Delete ``key`` if it is still the incarnation created at ``create_revision``."""
        txn = self._client.transactions
        return await self._transaction(
            [txn.create(key.encode()) == create_revision], [txn.delete(key.encode())]
        )

    async def _transaction(self, compare: list[Any], success: list[Any]) -> bool:
        succeeded, _ = await self._call(
            lambda client: client.transaction(compare=compare, success=success, failure=[])
        )
        return bool(succeeded)

    # -- metadata: versioned reads, compare-and-swap, watches ------------------------------------

    async def read_prefix(self, prefix: str) -> tuple[list[Versioned], int]:
        """Every key under ``prefix`` and the store's revision at that read (a watch started
        at revision + 1 misses nothing and repeats nothing)."""
        result = await self._call(lambda client: client.get_prefix(prefix.encode()))
        entries = [
            Versioned(kv.key.decode(), bytes(kv.value), int(kv.mod_revision)) for kv in result
        ]
        return entries, int(result.header.revision)

    async def read(self, key: str) -> Versioned | None:
        result = await self._call(lambda client: client.get(key.encode()))
        if result is None:
            return None
        return Versioned(key, bytes(result.value), int(result.mod_revision))

    async def swap(self, key: str, value: bytes | None, mod_revision: int) -> int | None:
        """Put ``value`` (delete with None) if ``key`` was last changed at ``mod_revision``
        (0: if it does not exist). The revision of the change, None if the key moved on."""
        txn = self._client.transactions
        operation = txn.delete(key.encode()) if value is None else txn.put(key.encode(), value)
        succeeded, responses = await self._call(
            lambda client: client.transaction(
                compare=[txn.mod(key.encode()) == mod_revision], success=[operation], failure=[]
            )
        )
        if not succeeded:
            return None
        reply = responses[0]
        header = reply.response_delete_range.header if value is None else reply.response_put.header
        return int(header.revision)

    async def put_absent_unless(self, key: str, value: bytes, guard: str) -> bool:
        """Put ``key`` if neither it nor ``guard`` exists (one transaction): the import of a
        previous build's files, which stops for good once ``guard`` (its marker) is written."""
        txn = self._client.transactions
        return await self._transaction(
            [txn.create(guard.encode()) == 0, txn.create(key.encode()) == 0],
            [txn.put(key.encode(), value)],
        )

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[Versioned]:
        """The changes under ``prefix`` from ``start_revision`` on, in revision order; raises
        when the stream breaks (etcd restarted, revision compacted): read again and rewatch."""
        watch = await self._call(
            lambda client: client.watch_prefix(prefix.encode(), start_revision=start_revision)
        )
        try:
            async for event in watch:
                kv = event.kv
                value = None if event.kind == "DELETE" else bytes(kv.value)
                yield Versioned(kv.key.decode(), value, int(kv.mod_revision))
        finally:
            await watch.cancel()


def etcd_store_for(config: BrokerConfig) -> EtcdStore:
    """A connection to the cluster's etcd as ``config`` says (not connected yet)."""
    ttl = max(1, round(config.metadata_store_session_timeout_millis / 1000))
    options = load_etcd_options(config.metadata_store_config_path)
    return EtcdStore(config.metadata_store_url, max(1.0, ttl / 3), options)


def _entry(kv: Any) -> Entry:
    return Entry(kv.key.decode(), bytes(kv.value), int(kv.create_revision), int(kv.lease))


def _stale_token(exc: Exception) -> bool:
    """Whether etcd refused the token itself, not the user's permissions or the request."""
    details = str(exc).lower()
    return "invalid auth token" in details or "auth store is old" in details


def _looks_like_tls(details: str) -> bool:
    """Whether gRPC's UNAVAILABLE details speak of the TLS handshake (a refused certificate)
    rather than of an unreachable host."""
    lowered = details.lower()
    # "Tls handshake failed" when we refuse etcd's certificate; "Unwrap failed
    # (TSI_DATA_CORRUPTED)" when etcd refuses ours (or wants one and got none).
    return any(word in lowered for word in ("handshake", "ssl", "certificate", "tls", "tsi_"))


def _refused(endpoint: Endpoint, options: EtcdOptions, exc: Exception) -> ConfigError:
    if endpoint.tls and _looks_like_tls(str(exc)):
        what = "refused the TLS handshake (check tlsTrustCertsFilePath, authority and the client"
        what += " certificate)"
    elif options.user:
        what = f"refused user {options.user!r} (check user and password)"
    else:
        what = "requires authentication (set user and password)"
    return ConfigError(f"etcd at {endpoint.url} {what} in {FILE_KEY}: {exc}", key=FILE_KEY)
