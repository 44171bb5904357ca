"""``NamespaceBoundaries``: each namespace's bundle cut points, shared in etcd (cluster mode).

A namespace starts as ``defaultNumberOfNamespaceBundles`` equal ranges and keeps them as long as
no bundle of it was split: no key is written for it, so a cluster written by an earlier build
(which had no split) reads exactly the ranges it always had. The first split writes
``bundles/<tenant>/<ns>`` = ``{"boundaries": ["0x00000000", ..., "0xffffffff"], "numBundles": n}``
(Pulsar's ``BundlesData``, which Pulsar keeps in the namespace's local policies); every later
split of any of its bundles rewrites it by compare-and-swap.

Every broker keeps the keys in memory (``MetadataMirror``: a read then a watch), because
``bundle_of`` runs on each lookup and each topic load. Acquiring a bundle is made conditional
on the key's revision being the one this broker's mirror holds (``revision``), so a broker whose
mirror lags behind a split cannot take ownership of a range that no longer exists.
"""

from __future__ import annotations

from broker.cluster.bundles import (
    Bundle,
    bundle_at,
    bundles_from,
    check_boundaries,
    default_boundaries,
    split_at,
)
from broker.metadata.mirror import MetadataMirror, VersionedStore
from protocol.topic_name import TopicName


class _Mirror(MetadataMirror):
    def revision(self, key: str) -> int:
        """The etcd ``mod_revision`` of the value held for ``key``; 0 when absent."""
        found = self._values.get(key)
        return 0 if found is None else found[1]

    async def reread(self, key: str) -> None:
        """Read ``key`` from etcd now rather than wait for the watch to deliver it."""
        found = await self.store.read(key)
        if found is not None:
            self._apply(key, found.value, found.mod_revision)


class NamespaceBoundaries:
    """The cut points of every namespace: split ones from etcd, the others by default."""

    def __init__(self, store: VersionedStore, prefix: str, default_count: int) -> None:
        self.prefix = prefix  # "/magnetar/<cluster>/bundles/"
        self._default = default_boundaries(default_count)
        self._mirror = _Mirror(store, prefix)

    async def start(self) -> None:
        await self._mirror.start()

    async def close(self) -> None:
        await self._mirror.close()

    def key(self, namespace: str) -> str:
        return f"{self.prefix}{namespace}"

    def boundaries(self, namespace: str) -> list[int]:
        stored = self._mirror.get(self.key(namespace))
        if stored is None:
            return self._default
        return decode(stored)

    def bundles(self, namespace: str) -> list[Bundle]:
        return bundles_from(namespace, self.boundaries(namespace))

    def bundle_of(self, topic: TopicName) -> Bundle:
        return bundle_at(topic, self.boundaries(str(topic.namespace_name)))

    def revision(self, namespace: str) -> int:
        """The revision an acquisition must find unchanged (0: never split)."""
        return self._mirror.revision(self.key(namespace))

    async def refresh(self, namespace: str) -> None:
        """Catch up with a split this broker's watch has not delivered yet."""
        await self._mirror.reread(self.key(namespace))

    def is_current(self, bundle: Bundle) -> bool:
        return bundle in self.bundles(bundle.namespace)

    async def split(self, bundle: Bundle, points: list[int]) -> list[Bundle]:
        """Replace ``bundle`` by its pieces cut at ``points`` in etcd (compare-and-swap,
        retried against other brokers' splits of other bundles of the namespace); the pieces.
        Only the owner of a bundle splits it, so ``bundle`` is still one of the ranges when we
        write."""
        pieces = split_at(bundle, points)

        def cut(current: object) -> object:
            bounds = self._default if current is None else decode(current)
            if bundle not in bundles_from(bundle.namespace, bounds):
                raise ValueError(f"{bundle.name} is no longer a bundle of its namespace")
            return encode(sorted({*bounds, *points}))

        await self._mirror.update(self.key(bundle.namespace), cut)
        return pieces


def encode(boundaries: list[int]) -> dict[str, object]:
    return {
        "boundaries": [f"0x{b:08x}" for b in boundaries],
        "numBundles": len(boundaries) - 1,
    }


def decode(value: object) -> list[int]:
    """The cut points of a stored ``BundlesData``; ValueError if it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("boundaries"), list):
        raise ValueError(f"not a BundlesData: {value!r}")
    boundaries = [int(str(b), 16) for b in value["boundaries"]]
    check_boundaries(boundaries)
    return boundaries
