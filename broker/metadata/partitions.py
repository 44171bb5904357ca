"""``PartitionStore``: partitioned topics and their partition counts (Pulsar's
``PartitionedTopicMetadata``); each partition is an ordinary topic named ``<topic>-partition-N``.
``FilePartitionStore`` keeps them in one JSON document (``broker/metadata/document.py``,
standalone), ``broker/metadata/etcd_partitions.py`` one etcd key each (cluster mode)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from broker.metadata.document import JsonDocument


class PartitionStore(Protocol):
    """Partitioned topics (full name without suffix) and their partition counts."""

    @property
    def changing(self) -> asyncio.Lock: ...

    def partitions(self, topic: str) -> int: ...

    def topics_of(self, namespace: str) -> list[str]: ...

    async def set(self, topic: str, partitions: int) -> None: ...

    async def delete(self, topic: str) -> None: ...


class FilePartitionStore:
    """Partitioned topics and their counts in ``<dataDir>/metadata/partitioned-topics.json``."""

    def __init__(self, directory: Path) -> None:
        self._doc = JsonDocument(directory / "partitioned-topics.json")
        self._partitions: dict[str, int] = {k: int(v) for k, v in self._doc.load().items()}
        #: Held by the admin API across a create/grow/delete, which awaits between reading the
        #: count and storing the new one: two growths must not interleave into a shrink.
        self.changing = asyncio.Lock()

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic``, 0 if it is not a partitioned topic."""
        return self._partitions.get(topic, 0)

    def topics_of(self, namespace: str) -> list[str]:
        prefix = f"persistent://{namespace}/"
        return sorted(t for t in self._partitions if t.startswith(prefix))

    async def set(self, topic: str, partitions: int) -> None:
        """Create or grow ``topic``; durable on return."""
        if partitions <= 0:
            raise ValueError(f"a partitioned topic needs at least one partition, not {partitions}")
        self._partitions[topic] = partitions
        await self._doc.save(self._partitions)

    async def delete(self, topic: str) -> None:
        if self._partitions.pop(topic, None) is not None:
            await self._doc.save(self._partitions)
