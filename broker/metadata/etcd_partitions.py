"""``EtcdPartitionStore``: partition counts as etcd keys (cluster mode), one per partitioned
topic (``admin/partitioned-topics/<t>/<ns>/<domain>/<topic>`` = ``{"partitions": N}``, Pulsar's
``PartitionedTopicMetadata``)."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.metadata.layout import MetadataKeys, namespace_path_prefix, topic_of_path
from broker.metadata.mirror import MetadataMirror


class EtcdPartitionStore:
    """The ``PartitionStore`` of ``broker/metadata/partitions.py`` over a ``MetadataMirror``."""

    def __init__(self, mirror: MetadataMirror, keys: MetadataKeys) -> None:
        self._mirror = mirror
        self._keys = keys
        #: The admin API's lock across read-then-grow on this broker; across brokers the
        #: compare-and-swap in ``set`` keeps the larger count (partitions never shrink).
        self.changing = asyncio.Lock()

    def partitions(self, topic: str) -> int:
        value = self._mirror.get(self._keys.partitioned_topic(topic))
        return 0 if value is None else int(value["partitions"])

    def topics_of(self, namespace: str) -> list[str]:
        start = len(self._keys.partitioned)
        prefix = self._keys.partitioned + namespace_path_prefix(namespace)
        topics = (topic_of_path(key[start:]) for key, _ in self._mirror.items(prefix))
        return sorted(t for t in topics if t.startswith("persistent://"))

    async def set(self, topic: str, partitions: int) -> None:
        if partitions <= 0:
            raise ValueError(f"a partitioned topic needs at least one partition, not {partitions}")

        def grow(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is not None and int(current["partitions"]) >= partitions:
                return current  # grown as far elsewhere meanwhile: never shrink
            return {"partitions": partitions}

        await self._mirror.update(self._keys.partitioned_topic(topic), grow)

    async def delete(self, topic: str) -> None:
        await self._mirror.update(self._keys.partitioned_topic(topic), lambda _: None)
