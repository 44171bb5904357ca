"""Broker-level metadata kept on local disk: namespaces, policies and schemas.

Standalone Pulsar keeps these in its metadata store; Magnetar keeps one small JSON document per
concern under ``<dataDir>/metadata/``, each rewritten atomically (temp + fsync + rename + dir
fsync) by ``broker.storage.files.atomic_write``, so a crash leaves the old or the new version.

Changes apply to the in-memory state at once, on the event loop (so reads never see a document
half-updated by another thread); the write itself runs in a disk thread (``broker/blocking.py``)
and the mutating methods are coroutines that return once the change is durable. Each write
carries a snapshot taken on the loop with a version number, and a disk thread never writes an
older version over a newer one, so concurrent changes can finish in any order.

* ``PolicyStore``: known namespaces (``public/default`` always exists, as in standalone Pulsar)
  and the PIP-6 deduplication policy at namespace and topic level. Resolution order: topic
  policy, then namespace policy, then the broker flag ``brokerDeduplicationEnabled``.
* ``SchemaStore``: the schemas producers declare (``Schema`` protobuf bytes, opaque here), one
  version list per topic; versions are 8-byte big-endian integers on the wire.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from pathlib import Path
from typing import Any

from broker.blocking import run_blocking
from broker.storage.files import OsFileLayer, atomic_write
from protocol.topic_name import NamespaceName

DEFAULT_NAMESPACES = ("public/default", "public/functions", "pulsar/system")
_VERSION = struct.Struct(">q")


class _JsonDocument:
    """One JSON file and the versions of it written so far (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._layer = OsFileLayer()
        self._lock = threading.Lock()
        self._version = 0  # snapshots taken (event loop)
        self._durable = 0  # newest snapshot on disk (disk threads, under the lock)

    def load(self) -> dict[str, Any]:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        loaded: dict[str, Any] = json.loads(data)
        return loaded

    @property
    def saved(self) -> bool:
        """Whether the last snapshot taken is durable."""
        return self._durable >= self._version

    async def save(self, document: dict[str, Any]) -> None:
        """Write ``document`` as it is now; return once it, or a newer version, is durable."""
        self._version += 1
        payload = json.dumps(document, sort_keys=True, indent=1).encode()
        await run_blocking(self._write, self._version, payload)

    def _write(self, version: int, payload: bytes) -> None:
        with self._lock:
            if version <= self._durable:
                return  # a newer snapshot, which includes this change, is already durable
            self._path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self._layer, self._path, payload)
            self._durable = version


class PolicyStore:
    """Namespaces and deduplication policies, persisted."""

    def __init__(self, directory: Path) -> None:
        self._doc = _JsonDocument(directory / "policies.json")
        loaded = self._doc.load()
        self.namespaces: set[str] = set(loaded.get("namespaces", DEFAULT_NAMESPACES))
        self.namespace_dedup: dict[str, bool] = dict(loaded.get("namespaceDeduplication", {}))
        self.topic_dedup: dict[str, bool] = dict(loaded.get("topicDeduplication", {}))

    async def _save(self) -> None:
        await self._doc.save(
            {
                "namespaces": sorted(self.namespaces),
                "namespaceDeduplication": self.namespace_dedup,
                "topicDeduplication": self.topic_dedup,
            }
        )

    def has_namespace(self, namespace: str) -> bool:
        return namespace in self.namespaces

    async def create_namespace(self, namespace: str) -> bool:
        """Add ``namespace`` (False if it exists).

        Raises:
            InvalidTopicNameError: not a valid ``tenant/namespace`` (the topic naming rules).
        """
        NamespaceName.parse(namespace)
        if namespace in self.namespaces:
            return False
        self.namespaces.add(namespace)
        await self._save()
        return True

    async def delete_namespace(self, namespace: str) -> None:
        self.namespaces.discard(namespace)
        self.namespace_dedup.pop(namespace, None)
        await self._save()

    def tenants(self) -> list[str]:
        return sorted({ns.split("/", 1)[0] for ns in self.namespaces})

    async def set_namespace_dedup(self, namespace: str, enabled: bool | None) -> None:
        if enabled is None:
            self.namespace_dedup.pop(namespace, None)
        else:
            self.namespace_dedup[namespace] = enabled
        await self._save()

    async def set_topic_dedup(self, topic: str, enabled: bool | None) -> None:
        if enabled is None:
            self.topic_dedup.pop(topic, None)
        else:
            self.topic_dedup[topic] = enabled
        await self._save()

    def dedup_enabled(self, topic: str, namespace: str, broker_default: bool) -> bool:
        if topic in self.topic_dedup:
            return self.topic_dedup[topic]
        if namespace in self.namespace_dedup:
            return self.namespace_dedup[namespace]
        return broker_default


class SchemaStore:
    """Schemas declared by producers: topic -> list of serialized ``Schema`` versions."""

    def __init__(self, directory: Path) -> None:
        self._doc = _JsonDocument(directory / "schemas.json")
        loaded = self._doc.load()
        self._schemas: dict[str, list[str]] = {k: list(v) for k, v in loaded.items()}

    async def put(self, topic: str, schema: bytes) -> bytes:
        """Store ``schema`` (if new) and return its version, once that version is durable."""
        encoded = base64.b64encode(schema).decode()
        versions = self._schemas.setdefault(topic, [])
        if encoded in versions:
            if not self._doc.saved:  # maybe added by a put still writing: wait for it
                await self._doc.save(self._schemas)
            return _VERSION.pack(versions.index(encoded))
        versions.append(encoded)
        await self._doc.save(self._schemas)
        return _VERSION.pack(len(versions) - 1)

    def get(self, topic: str, version: bytes | None) -> tuple[bytes, bytes] | None:
        versions = self._schemas.get(topic)
        if not versions:
            return None
        index = len(versions) - 1
        if version:
            index = _VERSION.unpack(version.rjust(8, b"\0")[-8:])[0]
            if not 0 <= index < len(versions):
                return None
        return base64.b64decode(versions[index]), _VERSION.pack(index)

    async def delete(self, topic: str) -> None:
        if self._schemas.pop(topic, None) is not None:
            await self._doc.save(self._schemas)
