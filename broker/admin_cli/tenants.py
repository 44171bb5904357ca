"""``tenants``: list, get, create, update, delete; a tenant's admin roles and clusters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.admin_cli.invocation import Admin, admin_verb, reading_verb
from broker.admin_cli.names import segment
from broker.admin_cli.values import comma_list

__all__ = ["tenants"]


@click.group()
def tenants() -> None:
    """Tenants."""


def _path(tenant: str) -> str:
    return f"/admin/v2/tenants/{segment(tenant)}"


@tenants.command("list")
@admin_verb
def tenants_list(admin: Admin) -> None:
    admin.show_resource("/admin/v2/tenants", title="tenant")


tenants.add_command(reading_verb("get", "tenant", _path))


def _tenant_info_options(verb: Callable[..., None]) -> Callable[..., None]:
    """TENANT, ``--admin-roles`` and ``--allowed-clusters``: create and update take the same."""
    verb = click.option("-c", "--allowed-clusters", help="Comma-separated clusters.")(verb)
    verb = click.option(
        "-r", "--admin-roles", help="Comma-separated roles that administer the tenant."
    )(verb)
    return click.argument("tenant")(verb)


def _tenant_info(admin_roles: str | None, allowed_clusters: str | None) -> dict[str, Any] | None:
    """Pulsar's TenantInfo; None when neither option was given."""
    if admin_roles is None and allowed_clusters is None:
        return None
    return {"adminRoles": comma_list(admin_roles), "allowedClusters": comma_list(allowed_clusters)}


@tenants.command("create")
@_tenant_info_options
@admin_verb
def tenants_create(
    admin: Admin, tenant: str, admin_roles: str | None, allowed_clusters: str | None
) -> None:
    body = _tenant_info(admin_roles, allowed_clusters)
    admin.change("PUT", _path(tenant), body, done=f"Created tenant {tenant}")


@tenants.command("update")
@_tenant_info_options
@admin_verb
def tenants_update(
    admin: Admin, tenant: str, admin_roles: str | None, allowed_clusters: str | None
) -> None:
    body = _tenant_info(admin_roles, allowed_clusters) or {}
    admin.change("POST", _path(tenant), body, done=f"Updated tenant {tenant}")


@tenants.command("delete")
@click.argument("tenant")
@admin_verb
def tenants_delete(admin: Admin, tenant: str) -> None:
    admin.change("DELETE", _path(tenant), done=f"Deleted tenant {tenant}")
