"""``PolicyStore``: namespaces, tenants and their policies; ``FilePolicyStore`` keeps them on
local disk (standalone), ``broker/metadata/etcd_policies.py`` in etcd (cluster mode).

Standalone Pulsar keeps these in its metadata store; standalone Magnetar keeps them in one JSON
document (``broker/metadata/document.py``). Known namespaces: ``public/default`` always exists,
as in standalone Pulsar; the PIP-6 deduplication policy at namespace and topic level resolves topic
policy, then namespace policy, then the broker flag ``brokerDeduplicationEnabled``. It also keeps
the tenants (``public`` and ``pulsar`` exist out of the box), and the namespace and topic policies
the admin API sets: retention, ``allowAutoTopicCreation``, message TTL, compaction threshold,
the idempotency window and the schema policies (stored under Pulsar's JSON field names;
``broker/topics/policies.py`` and ``broker/schemas/registry.py`` resolve them topic > namespace >
broker config).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any, Protocol

from broker.metadata.document import JsonDocument
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
#: Schema policies (``broker/schemas/``): a strategy name, the deprecated auto-update
#: strategy (Pulsar's ``SchemaAutoUpdateCompatibilityStrategy`` name), and two booleans.
SCHEMA_COMPATIBILITY_STRATEGY = "schema_compatibility_strategy"
SCHEMA_AUTO_UPDATE_STRATEGY = "schema_auto_update_compatibility_strategy"
ALLOW_AUTO_UPDATE_SCHEMA = "is_allow_auto_update_schema"
SCHEMA_VALIDATION_ENFORCED = "schema_validation_enforced"
POLICY_KEYS = (
    RETENTION,
    AUTO_TOPIC_CREATION,
    MESSAGE_TTL,
    COMPACTION_THRESHOLD,
    IDEMPOTENCY_WINDOW,
    SCHEMA_COMPATIBILITY_STRATEGY,
    SCHEMA_AUTO_UPDATE_STRATEGY,
    ALLOW_AUTO_UPDATE_SCHEMA,
    SCHEMA_VALIDATION_ENFORCED,
)


class PolicyStore(Protocol):
    """Tenants, namespaces and their policies. Reads answer from memory (the loop calls them on
    every lookup); the coroutines return once the change is durable in the store."""

    @property
    def namespaces(self) -> Set[str]: ...

    @property
    def namespace_dedup(self) -> Mapping[str, bool]: ...

    @property
    def topic_dedup(self) -> Mapping[str, bool]: ...

    def has_tenant(self, tenant: str) -> bool: ...

    def tenants(self) -> list[str]: ...

    async def create_tenant(self, tenant: str) -> bool: ...

    async def delete_tenant(self, tenant: str) -> None: ...

    def has_namespace(self, namespace: str) -> bool: ...

    async def create_namespace(self, namespace: str) -> bool: ...

    async def delete_namespace(self, namespace: str) -> None: ...

    def namespace_policy(self, namespace: str, key: str) -> Any: ...

    def topic_policy(self, topic: str, key: str) -> Any: ...

    async def set_namespace_policy(self, namespace: str, key: str, value: Any) -> None: ...

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None: ...

    def effective_policy(self, topic: str, namespace: str, key: str) -> Any: ...

    async def forget_topic(self, topic: str) -> None: ...

    async def set_namespace_dedup(self, namespace: str, enabled: bool | None) -> None: ...

    async def set_topic_dedup(self, topic: str, enabled: bool | None) -> None: ...

    def dedup_enabled(self, topic: str, namespace: str, broker_default: bool) -> bool: ...


class FilePolicyStore:
    """Tenants, namespaces and their policies in ``<dataDir>/metadata/policies.json``."""

    def __init__(self, directory: Path) -> None:
        self._doc = JsonDocument(directory / "policies.json")
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


def check_policy_key(key: str) -> None:
    if key not in POLICY_KEYS:
        raise ValueError(f"unknown policy {key!r}")


def _set_policy(table: dict[str, dict[str, Any]], owner: str, key: str, value: Any) -> None:
    check_policy_key(key)
    if value is None:
        policies = table.get(owner, {})
        policies.pop(key, None)
        if not policies:
            table.pop(owner, None)
    else:
        table.setdefault(owner, {})[key] = value
