"""The authorization metadata: tenants' ``TenantInfo`` and namespaces' permissions, persisted.

Kept in ``<dataDir>/metadata/auth_policies.json`` (atomic rewrite, as the other metadata
documents in ``broker/metadata/``): ``tenants`` maps a tenant to Pulsar's
``TenantInfo`` (``adminRoles``, ``allowedClusters``), ``namespaces`` maps ``tenant/ns`` to
``auth_policies.namespace_auth`` (role -> sorted actions). Deleting a tenant or a namespace
forgets its entry, so a namespace created again later does not inherit old grants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.metadata.document import JsonDocument

__all__ = ["ACTIONS", "AuthPolicyStore"]

#: Pulsar's ``AuthAction`` values.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


class AuthPolicyStore:
    """Tenant admin roles and namespace permissions (changes are durable when awaited)."""

    def __init__(self, directory: Path) -> None:
        self._doc = JsonDocument(directory / "auth_policies.json")
        loaded = self._doc.load()
        self._tenants: dict[str, dict[str, list[str]]] = {
            k: {
                "adminRoles": list(v.get("adminRoles", [])),
                "allowedClusters": list(v.get("allowedClusters", [])),
            }
            for k, v in loaded.get("tenants", {}).items()
        }
        self._namespaces: dict[str, dict[str, list[str]]] = {
            k: {role: list(actions) for role, actions in v.items()}
            for k, v in loaded.get("namespaces", {}).items()
        }

    async def _save(self) -> None:
        await self._doc.save({"tenants": self._tenants, "namespaces": self._namespaces})

    # -- tenants ------------------------------------------------------------------------------

    def admin_roles(self, tenant: str) -> list[str]:
        return list(self._tenants.get(tenant, {}).get("adminRoles", []))

    def tenant_info(self, tenant: str, default_cluster: str) -> dict[str, Any]:
        info = self._tenants.get(tenant, {})
        return {
            "adminRoles": list(info.get("adminRoles", [])),
            "allowedClusters": list(info.get("allowedClusters") or [default_cluster]),
        }

    async def set_tenant(self, tenant: str, admin_roles: list[str], clusters: list[str]) -> None:
        self._tenants[tenant] = {
            "adminRoles": sorted(set(admin_roles)),
            "allowedClusters": clusters,
        }
        await self._save()

    async def forget_tenant(self, tenant: str) -> None:
        if self._tenants.pop(tenant, None) is not None:
            await self._save()

    # -- namespaces ---------------------------------------------------------------------------

    def permissions(self, namespace: str) -> dict[str, list[str]]:
        """``role -> actions`` granted on ``namespace`` (Pulsar's ``namespace_auth``)."""
        return {
            role: list(actions) for role, actions in self._namespaces.get(namespace, {}).items()
        }

    def allows(self, namespace: str, role: str, action: str) -> bool:
        return action in self._namespaces.get(namespace, {}).get(role, ())

    async def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        """Set ``role``'s actions on ``namespace`` (Pulsar's grant replaces them)."""
        self._namespaces.setdefault(namespace, {})[role] = sorted(set(actions))
        await self._save()

    async def set_permissions(self, namespace: str, grants: dict[str, list[str]]) -> None:
        self._namespaces[namespace] = {role: sorted(set(a)) for role, a in grants.items()}
        await self._save()

    async def revoke(self, namespace: str, role: str) -> None:
        grants = self._namespaces.get(namespace, {})
        if grants.pop(role, None) is not None:
            await self._save()

    async def forget_namespace(self, namespace: str) -> None:
        if self._namespaces.pop(namespace, None) is not None:
            await self._save()
