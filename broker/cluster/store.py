"""``EtcdStore``: the few etcd v3 operations cluster mode needs, over the ``aetcd`` client.

Every other module of ``broker.cluster`` talks to this class only, so the client library (which
ships no type hints) is confined here. Keys and values are ``str`` / ``bytes`` as etcd keeps
them; the ownership epoch is the key's ``create_revision``, which etcd makes unique and
increasing across the whole store: a later owner of a bundle always has a larger epoch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker.metadata.mirror import Versioned

if TYPE_CHECKING:
    from broker.config import BrokerConfig

ETCD_SCHEME = "etcd:"


class MetadataStoreUrlError(ValueError):
    """``metadataStoreUrl`` is not ``etcd:http://host:port[,...]``."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


def parse_metadata_store_url(url: str) -> list[Endpoint]:
    """The etcd endpoints of ``etcd:http://h1:2379,http://h2:2379`` (Pulsar's syntax)."""
    if not url.startswith(ETCD_SCHEME):
        raise MetadataStoreUrlError(f"metadataStoreUrl {url!r}: only etcd: stores are supported")
    endpoints = []
    for part in url[len(ETCD_SCHEME) :].split(","):
        split = urlsplit(part.strip() if "//" in part else f"http://{part.strip()}")
        if split.scheme != "http" or not split.hostname:
            raise MetadataStoreUrlError(f"metadataStoreUrl {url!r}: bad endpoint {part!r}")
        endpoints.append(Endpoint(split.hostname, split.port or 2379))
    return endpoints


@dataclass(frozen=True, slots=True)
class Entry:
    """One key as read: its value and the revision that created it (the ownership epoch)."""

    key: str
    value: bytes
    create_revision: int
    lease: int


class EtcdStore:
    """One connection to etcd (the first endpoint; see docs/CLUSTER.md for the limits)."""

    def __init__(self, url: str, timeout_seconds: float) -> None:
        # Imported here: aetcd pulls in grpc (~23 MiB of RSS), which a standalone broker
        # (the default) must not pay for.
        import aetcd

        endpoint = parse_metadata_store_url(url)[0]
        self._timeout = timeout_seconds
        self._client: Any = aetcd.Client(
            host=endpoint.host, port=endpoint.port, timeout=timeout_seconds
        )

    async def connect(self) -> None:
        await self._client.connect()

    async def close(self) -> None:
        await self._client.close()

    # -- leases --------------------------------------------------------------------------------

    async def grant_lease(self, ttl_seconds: int) -> int:
        lease = await self._client.lease(ttl_seconds)
        return int(lease.id)

    async def keep_alive(self, lease_id: int) -> int:
        """Refresh the lease; its remaining TTL in seconds, <= 0 when it has expired."""
        reply = await self._client.refresh_lease(lease_id)
        return -1 if reply is None else int(reply.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._client.revoke_lease(lease_id)

    # -- keys ----------------------------------------------------------------------------------

    async def put(self, key: str, value: bytes, lease_id: int) -> None:
        await self._client.put(key.encode(), value, lease=lease_id)

    async def get(self, key: str) -> Entry | None:
        result = await self._client.get(key.encode())
        return None if result is None else _entry(result)

    async def get_prefix(self, prefix: str) -> list[Entry]:
        result = await self._client.get_prefix(prefix.encode())
        return [_entry(kv) for kv in result]

    async def delete(self, key: str) -> None:
        await self._client.delete(key.encode())

    async def create(self, key: str, value: bytes, lease_id: int) -> bool:
        """Put ``key`` only if it does not exist (one transaction); whether it was created."""
        txn = self._client.transactions
        succeeded, _ = await self._client.transaction(
            compare=[txn.create(key.encode()) == 0],
            success=[txn.put(key.encode(), value, lease=lease_id)],
            failure=[],
        )
        return bool(succeeded)

    async def delete_if_created_at(self, key: str, create_revision: int) -> bool:
        """Delete ``key`` if it is still the incarnation created at ``create_revision``."""
        txn = self._client.transactions
        succeeded, _ = await self._client.transaction(
            compare=[txn.create(key.encode()) == create_revision],
            success=[txn.delete(key.encode())],
            failure=[],
        )
        return bool(succeeded)

    # -- metadata: versioned reads, compare-and-swap, watches ------------------------------------

    async def read_prefix(self, prefix: str) -> tuple[list[Versioned], int]:
        """Every key under ``prefix`` and the store's revision at that read (a watch started
        at revision + 1 misses nothing and repeats nothing)."""
        result = await self._client.get_prefix(prefix.encode())
        entries = [
            Versioned(kv.key.decode(), bytes(kv.value), int(kv.mod_revision)) for kv in result
        ]
        return entries, int(result.header.revision)

    async def read(self, key: str) -> Versioned | None:
        result = await self._client.get(key.encode())
        if result is None:
            return None
        return Versioned(key, bytes(result.value), int(result.mod_revision))

    async def swap(self, key: str, value: bytes | None, mod_revision: int) -> int | None:
        """Put ``value`` (delete with None) if ``key`` was last changed at ``mod_revision``
        (0: if it does not exist). The revision of the change, None if the key moved on."""
        txn = self._client.transactions
        operation = txn.delete(key.encode()) if value is None else txn.put(key.encode(), value)
        succeeded, responses = await self._client.transaction(
            compare=[txn.mod(key.encode()) == mod_revision], success=[operation], failure=[]
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
        succeeded, _ = await self._client.transaction(
            compare=[txn.create(guard.encode()) == 0, txn.create(key.encode()) == 0],
            success=[txn.put(key.encode(), value)],
            failure=[],
        )
        return bool(succeeded)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[Versioned]:
        """The changes under ``prefix`` from ``start_revision`` on, in revision order; raises
        when the stream breaks (etcd restarted, revision compacted): read again and rewatch."""
        watch = await self._client.watch_prefix(prefix.encode(), start_revision=start_revision)
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
    return EtcdStore(config.metadata_store_url, timeout_seconds=max(1.0, ttl / 3))


def _entry(kv: Any) -> Entry:
    return Entry(kv.key.decode(), bytes(kv.value), int(kv.create_revision), int(kv.lease))
