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
  It also keeps the tenants (``public`` and ``pulsar`` exist out of the box), and the namespace
  and topic policies the admin API sets: retention, ``allowAutoTopicCreation`` and message TTL
  (stored under Pulsar's JSON field names, resolved topic > namespace > broker config).
* ``PartitionStore``: partitioned topics and their partition counts (Pulsar's
  ``PartitionedTopicMetadata``); each partition is an ordinary topic named ``<topic>-partition-N``.
* ``SchemaStore``: the schemas producers declare (``Schema`` protobuf bytes, opaque here), one
  version list per topic; versions are 8-byte big-endian integers on the wire.
"""

from __future__ import annotations

import asyncio
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
#: Policy keys, as Pulsar spells them in its ``Policies`` / ``TopicPolicies`` JSON.
RETENTION = "retention_policies"
AUTO_TOPIC_CREATION = "autoTopicCreationOverride"
MESSAGE_TTL = "message_ttl_in_seconds"
#: Backlog bytes that trigger a compaction (issue #14; Pulsar's ``compaction_threshold``).
COMPACTION_THRESHOLD = "compaction_threshold"
#: Magnetar's idempotency-key window (issue #16): ``{"idempotencyWindowSeconds": int,
#: "idempotencyWindowMaxKeys": int}``, either field may be absent.
IDEMPOTENCY_WINDOW = "idempotencyWindow"
POLICY_KEYS = (
    RETENTION,
    AUTO_TOPIC_CREATION,
    MESSAGE_TTL,
    COMPACTION_THRESHOLD,
    IDEMPOTENCY_WINDOW,
)
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
    """Tenants, namespaces and their policies, persisted."""

    def __init__(self, directory: Path) -> None:
        self._doc = _JsonDocument(directory / "policies.json")
        loaded = self._doc.load()
        self.namespaces: set[str] = set(loaded.get("namespaces", DEFAULT_NAMESPACES))
        # Documents written before tenants were stored: the tenants of the namespaces.
        self.tenant_names: set[str] = set(
            loaded.get("tenants", {ns.split("/", 1)[0] for ns in self.namespaces})
        )
        self.namespace_dedup: dict[str, bool] = dict(loaded.get("namespaceDeduplication", {}))
        self.topic_dedup: dict[str, bool] = dict(loaded.get("topicDeduplication", {}))
        self.namespace_policies: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in loaded.get("namespacePolicies", {}).items()
        }
        self.topic_policies: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in loaded.get("topicPolicies", {}).items()
        }

    async def _save(self) -> None:
        await self._doc.save(
            {
                "tenants": sorted(self.tenant_names),
                "namespaces": sorted(self.namespaces),
                "namespaceDeduplication": self.namespace_dedup,
                "topicDeduplication": self.topic_dedup,
                "namespacePolicies": self.namespace_policies,
                "topicPolicies": self.topic_policies,
            }
        )

    # -- tenants ----------------------------------------------------------------------------

    def has_tenant(self, tenant: str) -> bool:
        return tenant in self.tenant_names

    async def create_tenant(self, tenant: str) -> bool:
        """Add ``tenant`` (False if it exists)."""
        if tenant in self.tenant_names:
            return False
        self.tenant_names.add(tenant)
        await self._save()
        return True

    async def delete_tenant(self, tenant: str) -> None:
        """Remove ``tenant``; the caller checked that it has no namespace left."""
        self.tenant_names.discard(tenant)
        await self._save()

    # -- policies -----------------------------------------------------------------------------

    def namespace_policy(self, namespace: str, key: str) -> Any:
        """The namespace's value for ``key`` (one of ``POLICY_KEYS``), None if unset."""
        return self.namespace_policies.get(namespace, {}).get(key)

    def topic_policy(self, topic: str, key: str) -> Any:
        return self.topic_policies.get(topic, {}).get(key)

    async def set_namespace_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one namespace policy; durable on return."""
        _set_policy(self.namespace_policies, namespace, key, value)
        await self._save()

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        _set_policy(self.topic_policies, topic, key, value)
        await self._save()

    def effective_policy(self, topic: str, namespace: str, key: str) -> Any:
        """Topic policy, else namespace policy, else None (the broker config applies)."""
        value = self.topic_policy(topic, key)
        return value if value is not None else self.namespace_policy(namespace, key)

    async def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's policies (Pulsar deletes them with the topic)."""
        had = self.topic_policies.pop(topic, None), self.topic_dedup.pop(topic, None)
        if had != (None, None):
            await self._save()

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
        self.namespace_policies.pop(namespace, None)
        await self._save()

    def tenants(self) -> list[str]:
        return sorted(self.tenant_names | {ns.split("/", 1)[0] for ns in self.namespaces})

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


def _set_policy(table: dict[str, dict[str, Any]], owner: str, key: str, value: Any) -> None:
    if key not in POLICY_KEYS:
        raise ValueError(f"unknown policy {key!r}")
    if value is None:
        policies = table.get(owner, {})
        policies.pop(key, None)
        if not policies:
            table.pop(owner, None)
    else:
        table.setdefault(owner, {})[key] = value


class PartitionStore:
    """Partitioned topics (full name without suffix) and their partition counts, persisted."""

    def __init__(self, directory: Path) -> None:
        self._doc = _JsonDocument(directory / "partitioned-topics.json")
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
