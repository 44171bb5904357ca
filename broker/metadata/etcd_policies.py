"""``EtcdPolicyStore``: tenants, namespaces and their policies as etcd keys (cluster mode).

The ``PolicyStore`` of ``broker/metadata/policies.py`` over a ``MetadataMirror``: reads answer
from the mirror, writes are compare-and-swap on one key (``broker/metadata/layout.py``). A
tenant or namespace exists exactly while its key does; a write to a namespace's policies never
creates the namespace again (it may have been deleted through another broker meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.metadata.layout import MetadataKeys, topic_of_path
from broker.metadata.mirror import MetadataMirror
from broker.metadata.policies import check_policy_key
from protocol.topic_name import NamespaceName

#: Pulsar's ``Policies.deduplicationEnabled``, kept beside the other policies of a key.
DEDUP = "deduplicationEnabled"


class EtcdPolicyStore:
    """Tenants, namespaces and their policies under ``admin/policies/`` and
    ``admin/topic-policies/``."""

    def __init__(self, mirror: MetadataMirror, keys: MetadataKeys) -> None:
        self._mirror = mirror
        self._keys = keys

    # -- views the admin API reads ----------------------------------------------------------------

    def _namespace_values(self) -> dict[str, dict[str, Any]]:
        start = len(self._keys.policies)
        return {
            key[start:]: value
            for key, value in self._mirror.items(self._keys.policies)
            if key.count("/", start) == 1
        }

    @property
    def namespaces(self) -> frozenset[str]:
        return frozenset(self._namespace_values())

    @property
    def namespace_dedup(self) -> Mapping[str, bool]:
        return {ns: v[DEDUP] for ns, v in self._namespace_values().items() if DEDUP in v}

    @property
    def topic_dedup(self) -> Mapping[str, bool]:
        start = len(self._keys.topic_policies)
        return {
            topic_of_path(key[start:]): value[DEDUP]
            for key, value in self._mirror.items(self._keys.topic_policies)
            if DEDUP in value
        }

    # -- tenants ----------------------------------------------------------------------------------

    def has_tenant(self, tenant: str) -> bool:
        return self._keys.tenant(tenant) in self._mirror

    def tenants(self) -> list[str]:
        start = len(self._keys.policies)
        return sorted(
            {key[start:].split("/", 1)[0] for key, _ in self._mirror.items(self._keys.policies)}
        )

    async def create_tenant(self, tenant: str) -> bool:
        return await self._create(
            self._keys.tenant(tenant), {"adminRoles": [], "allowedClusters": []}
        )

    async def delete_tenant(self, tenant: str) -> None:
        await self._mirror.update(self._keys.tenant(tenant), lambda _: None)

    # -- namespaces -------------------------------------------------------------------------

    def has_namespace(self, namespace: str) -> bool:
        return self._keys.namespace(namespace) in self._mirror

    async def create_namespace(self, namespace: str) -> bool:
        NamespaceName.parse(namespace)  # InvalidTopicNameError: not tenant/namespace
        return await self._create(self._keys.namespace(namespace), {})

    async def delete_namespace(self, namespace: str) -> None:
        # One key: its policies and permissions go with it (Pulsar's Policies document).
        await self._mirror.update(self._keys.namespace(namespace), lambda _: None)

    async def _create(self, key: str, value: dict[str, Any]) -> bool:
        created = False

        def create(current: Any) -> Any:
            nonlocal created
            created = current is None
            return value if current is None else current

        await self._mirror.update(key, create)
        return created

    # -- policies ---------------------------------------------------------------------------

    def namespace_policy(self, namespace: str, key: str) -> Any:
        return (self._mirror.get(self._keys.namespace(namespace)) or {}).get(key)

    def topic_policy(self, topic: str, key: str) -> Any:
        return (self._mirror.get(self._keys.topic_policy(topic)) or {}).get(key)

    def effective_policy(self, topic: str, namespace: str, key: str) -> Any:
        value = self.topic_policy(topic, key)
        return value if value is not None else self.namespace_policy(namespace, key)

    async def set_namespace_policy(self, namespace: str, key: str, value: Any) -> None:
        check_policy_key(key)
        await self._set_namespace_field(namespace, key, value)

    async def set_namespace_dedup(self, namespace: str, enabled: bool | None) -> None:
        await self._set_namespace_field(namespace, DEDUP, enabled)

    async def _set_namespace_field(self, namespace: str, field: str, value: Any) -> None:
        def change(current: dict[str, Any] | None) -> dict[str, Any] | None:
            return None if current is None else _with(current, field, value)

        await self._mirror.update(self._keys.namespace(namespace), change)

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        check_policy_key(key)
        await self._set_topic_field(topic, key, value)

    async def set_topic_dedup(self, topic: str, enabled: bool | None) -> None:
        await self._set_topic_field(topic, DEDUP, enabled)

    async def _set_topic_field(self, topic: str, field: str, value: Any) -> None:
        def change(current: dict[str, Any] | None) -> dict[str, Any] | None:
            return _with(current or {}, field, value) or None  # no policy left: no key

        await self._mirror.update(self._keys.topic_policy(topic), change)

    async def forget_topic(self, topic: str) -> None:
        await self._mirror.update(self._keys.topic_policy(topic), lambda _: None)

    def dedup_enabled(self, topic: str, namespace: str, broker_default: bool) -> bool:
        value = self.topic_policy(topic, DEDUP)
        if value is None:
            value = self.namespace_policy(namespace, DEDUP)
        return broker_default if value is None else bool(value)


def _with(document: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """``document`` with ``field`` set to ``value`` (removed for None)."""
    if value is None:
        document.pop(field, None)
    else:
        document[field] = value
    return document
