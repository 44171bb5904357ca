"""The authorization metadata: tenants' ``TenantInfo`` and namespaces' permissions.

``AuthPolicyStore`` is what the authorizer and the admin API hold; it keeps the metadata in one
of two backends (the ``AuthPolicies`` protocol):

* ``FileAuthPolicies`` (standalone): ``<dataDir>/metadata/auth_policies.json`` (atomic rewrite,
  as the other metadata documents in ``broker/metadata/``): ``tenants`` maps a tenant to
  Pulsar's ``TenantInfo`` (``adminRoles``, ``allowedClusters``), ``namespaces`` maps ``tenant/ns``
  to ``auth_policies.namespace_auth`` (role -> sorted actions).
* ``EtcdAuthPolicies`` (cluster mode): in the tenant's and the namespace's keys that
  ``broker/metadata/etcd_policies.py`` also writes (Pulsar's ``/admin/policies/<tenant>`` and
  ``/admin/policies/<tenant>/<ns>``), each change one compare-and-swap, so a grant or revoke
  changes one role of one namespace and nothing else, on every broker within the watch's delay.
  A grant on a namespace that does not exist (deleted through another broker) writes nothing.

Deleting a tenant or a namespace forgets its entry, so a namespace created again later does not
inherit old grants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from broker.metadata.document import JsonDocument
from broker.metadata.layout import MetadataKeys
from broker.metadata.mirror import MetadataMirror

__all__ = ["ACTIONS", "AuthPolicies", "AuthPolicyStore", "EtcdAuthPolicies", "FileAuthPolicies"]

#: Pulsar's ``AuthAction`` values.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


class AuthPolicies(Protocol):
    """Tenant admin roles and namespace permissions; reads from memory, writes durable when
    awaited."""

    def admin_roles(self, tenant: str) -> list[str]: ...

    def tenant_info(self, tenant: str, default_cluster: str) -> dict[str, Any]: ...

    async def set_tenant(
        self, tenant: str, admin_roles: list[str], clusters: list[str]
    ) -> None: ...

    async def forget_tenant(self, tenant: str) -> None: ...

    def permissions(self, namespace: str) -> dict[str, list[str]]: ...

    def allows(self, namespace: str, role: str, action: str) -> bool: ...

    async def grant(self, namespace: str, role: str, actions: list[str]) -> None: ...

    async def set_permissions(self, namespace: str, grants: dict[str, list[str]]) -> None: ...

    async def revoke(self, namespace: str, role: str) -> None: ...

    async def forget_namespace(self, namespace: str) -> None: ...


class AuthPolicyStore:
    """The authorization metadata over its backend (``FileAuthPolicies`` until the broker
    switches it to etcd with ``use``, before serving)."""

    def __init__(self, directory: Path) -> None:
        self.backend: AuthPolicies = FileAuthPolicies(directory)

    def use(self, backend: AuthPolicies) -> None:
        self.backend = backend

    def admin_roles(self, tenant: str) -> list[str]:
        return self.backend.admin_roles(tenant)

    def tenant_info(self, tenant: str, default_cluster: str) -> dict[str, Any]:
        return self.backend.tenant_info(tenant, default_cluster)

    async def set_tenant(self, tenant: str, admin_roles: list[str], clusters: list[str]) -> None:
        await self.backend.set_tenant(tenant, admin_roles, clusters)

    async def forget_tenant(self, tenant: str) -> None:
        await self.backend.forget_tenant(tenant)

    def permissions(self, namespace: str) -> dict[str, list[str]]:
        """``role -> actions`` granted on ``namespace`` (Pulsar's ``namespace_auth``)."""
        return self.backend.permissions(namespace)

    def allows(self, namespace: str, role: str, action: str) -> bool:
        return self.backend.allows(namespace, role, action)

    async def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        """Set ``role``'s actions on ``namespace`` (Pulsar's grant replaces them)."""
        await self.backend.grant(namespace, role, actions)

    async def set_permissions(self, namespace: str, grants: dict[str, list[str]]) -> None:
        await self.backend.set_permissions(namespace, grants)

    async def revoke(self, namespace: str, role: str) -> None:
        await self.backend.revoke(namespace, role)

    async def forget_namespace(self, namespace: str) -> None:
        await self.backend.forget_namespace(namespace)


def _tenant_info(info: dict[str, Any], default_cluster: str) -> dict[str, Any]:
    return {
        "adminRoles": list(info.get("adminRoles", [])),
        "allowedClusters": list(info.get("allowedClusters") or [default_cluster]),
    }


class FileAuthPolicies:
    """Tenant admin roles and namespace permissions in one JSON document."""

    def __init__(self, directory: Path) -> None:
        self._doc = JsonDocument(directory / "auth_policies.json")
        loaded = self._doc.load()
        self.tenants: dict[str, dict[str, list[str]]] = {
            k: {
                "adminRoles": list(v.get("adminRoles", [])),
                "allowedClusters": list(v.get("allowedClusters", [])),
            }
            for k, v in loaded.get("tenants", {}).items()
        }
        self.namespaces: dict[str, dict[str, list[str]]] = {
            k: {role: list(actions) for role, actions in v.items()}
            for k, v in loaded.get("namespaces", {}).items()
        }

    async def _save(self) -> None:
        await self._doc.save({"tenants": self.tenants, "namespaces": self.namespaces})

    def admin_roles(self, tenant: str) -> list[str]:
        return list(self.tenants.get(tenant, {}).get("adminRoles", []))

    def tenant_info(self, tenant: str, default_cluster: str) -> dict[str, Any]:
        return _tenant_info(self.tenants.get(tenant, {}), default_cluster)

    async def set_tenant(self, tenant: str, admin_roles: list[str], clusters: list[str]) -> None:
        self.tenants[tenant] = {"adminRoles": sorted(set(admin_roles)), "allowedClusters": clusters}
        await self._save()

    async def forget_tenant(self, tenant: str) -> None:
        if self.tenants.pop(tenant, None) is not None:
            await self._save()

    def permissions(self, namespace: str) -> dict[str, list[str]]:
        return {role: list(actions) for role, actions in self.namespaces.get(namespace, {}).items()}

    def allows(self, namespace: str, role: str, action: str) -> bool:
        return action in self.namespaces.get(namespace, {}).get(role, ())

    async def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        self.namespaces.setdefault(namespace, {})[role] = sorted(set(actions))
        await self._save()

    async def set_permissions(self, namespace: str, grants: dict[str, list[str]]) -> None:
        self.namespaces[namespace] = {role: sorted(set(a)) for role, a in grants.items()}
        await self._save()

    async def revoke(self, namespace: str, role: str) -> None:
        grants = self.namespaces.get(namespace, {})
        if grants.pop(role, None) is not None:
            await self._save()

    async def forget_namespace(self, namespace: str) -> None:
        if self.namespaces.pop(namespace, None) is not None:
            await self._save()


class EtcdAuthPolicies:
    """Tenant admin roles and namespace permissions in the tenants' and namespaces' etcd keys."""

    def __init__(self, mirror: MetadataMirror, keys: MetadataKeys) -> None:
        self._mirror = mirror
        self._keys = keys

    def _grants(self, namespace: str) -> dict[str, list[str]]:
        policies = self._mirror.get(self._keys.namespace(namespace)) or {}
        grants: dict[str, list[str]] = policies.get("auth_policies", {}).get("namespace_auth", {})
        return grants

    def admin_roles(self, tenant: str) -> list[str]:
        return list((self._mirror.get(self._keys.tenant(tenant)) or {}).get("adminRoles", []))

    def tenant_info(self, tenant: str, default_cluster: str) -> dict[str, Any]:
        return _tenant_info(self._mirror.get(self._keys.tenant(tenant)) or {}, default_cluster)

    async def set_tenant(self, tenant: str, admin_roles: list[str], clusters: list[str]) -> None:
        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            info = current or {}
            info.update(adminRoles=sorted(set(admin_roles)), allowedClusters=clusters)
            return info

        await self._mirror.update(self._keys.tenant(tenant), change)

    async def forget_tenant(self, tenant: str) -> None:
        await self._mirror.update(self._keys.tenant(tenant), lambda _: None)

    def permissions(self, namespace: str) -> dict[str, list[str]]:
        return {role: list(actions) for role, actions in self._grants(namespace).items()}

    def allows(self, namespace: str, role: str, action: str) -> bool:
        return action in self._grants(namespace).get(role, ())

    async def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        def change(grants: dict[str, list[str]]) -> None:
            grants[role] = sorted(set(actions))

        await self._change_grants(namespace, change)

    async def set_permissions(self, namespace: str, grants: dict[str, list[str]]) -> None:
        def change(current: dict[str, list[str]]) -> None:
            current.clear()
            current.update({role: sorted(set(a)) for role, a in grants.items()})

        await self._change_grants(namespace, change)

    async def revoke(self, namespace: str, role: str) -> None:
        await self._change_grants(namespace, lambda grants: grants.pop(role, None))

    async def forget_namespace(self, namespace: str) -> None:
        await self._change_grants(namespace, lambda grants: grants.clear())

    async def _change_grants(self, namespace: str, change: Any) -> None:
        """Apply ``change`` to the namespace's ``namespace_auth`` in place, by compare-and-swap
        on the namespace's key; nothing if the namespace does not exist."""

        def update(policies: dict[str, Any] | None) -> dict[str, Any] | None:
            if policies is None:
                return None
            auth = policies.setdefault("auth_policies", {})
            grants = auth.setdefault("namespace_auth", {})
            change(grants)
            if not grants:
                del auth["namespace_auth"]
            if not auth:
                del policies["auth_policies"]
            return policies

        await self._mirror.update(self._keys.namespace(namespace), update)
