"""``/admin/v2/namespaces/{tenant}/{ns}/permissions[/{role}]``: namespace grants, as Pulsar.

``GET .../permissions`` answers ``{role: [actions]}`` (Pulsar's ``namespace_auth``);
``POST .../permissions/{role}`` with a JSON array of actions (``["produce", "consume"]``)
replaces that role's grant; ``DELETE .../permissions/{role}`` revokes it. The actions are
Pulsar's ``AuthAction`` names; only tenant admins and superusers get here
(``broker/auth/http.py``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin.common import (
    AdminError,
    existing_namespace,
    json_response,
    no_content,
    path_part,
    read_json,
    service_of,
)
from broker.auth.store import ACTIONS

__all__ = ["parse_actions", "routes"]

PERMISSIONS = "/admin/v2/namespaces/{tenant}/{ns}/permissions"


def parse_actions(value: Any) -> list[str]:
    """A JSON list of ``AuthAction`` names (400 for anything else)."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise AdminError(400, f"Body must be a JSON array of actions from {list(ACTIONS)}")
    unknown = sorted(set(value) - set(ACTIONS))
    if unknown:
        raise AdminError(400, f"Unknown actions {unknown}; valid: {list(ACTIONS)}")
    return sorted(set(value))


def role_of(request: web.Request) -> str:
    role = path_part(request, "role")
    if not role:
        raise AdminError(412, "Role is empty")
    return role


async def get_permissions(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    return json_response(service_of(request).security.store.permissions(namespace))


async def grant_permission(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    role = role_of(request)
    actions = parse_actions(await read_json(request))
    await service_of(request).security.store.grant(namespace, role, actions)
    return no_content()


async def revoke_permission(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    role = role_of(request)
    await service_of(request).security.store.revoke(namespace, role)
    return no_content()


def routes() -> list[web.RouteDef]:
    return [
        web.get(PERMISSIONS, get_permissions),
        web.post(PERMISSIONS + "/{role}", grant_permission),
        web.delete(PERMISSIONS + "/{role}", revoke_permission),
    ]
