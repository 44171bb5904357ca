"""The admin API's guard: authenticate each HTTP request, then authorize it by route.

``security_middleware`` runs inside ``broker.admin.json_errors`` (so refusals get Pulsar's
``{"reason": ...}`` shape): 401 when authentication is on and the request's credentials
(``Authorization: Bearer|Basic``, or a verified client certificate on ``webServicePortTls``)
are missing or wrong, after ``authenticationFailureDelayMs`` (a password check runs on the bounded
check pool, off the event loop, as on the binary port); 403 when the role may not use the
route. The request's role is kept under ``ROLE`` for handlers that need it.

``rule_for`` maps a route (method and pattern) to one ``Authorizer`` check, following Pulsar's
admin resources (see ``broker/auth/authorization.py``). A route it does not know needs a
superuser: an endpoint added later is closed until it is given a rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.admin.common import SERVICE, AdminError, namespace_name, tenant_name, topic_name
from broker.auth.authorization import Authorizer
from broker.auth.handshake import peer_certificate
from broker.auth.identity import AuthenticationFailure
from broker.metrics import METRICS_PATH

__all__ = ["ROLE", "rule_for", "security_middleware"]

ROLE: web.RequestKey[str | None] = web.RequestKey("role", object)  # type: ignore[arg-type]

Check = Callable[[Authorizer, str | None, web.Request], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_NAMESPACE = "/admin/v2/namespaces/{tenant}/{ns}"
_TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
_TOPIC_LOOKUPS = frozenset(
    {"/stats", "/internalStats", "/partitioned-stats", "/partitioned-internalStats", "/partitions"}
)


def _open(_authz: Authorizer, _role: str | None, _request: web.Request) -> None:
    return None


def _authenticated(authz: Authorizer, role: str | None, _request: web.Request) -> None:
    authz.check_authenticated(role)


def _superuser(authz: Authorizer, role: str | None, _request: web.Request) -> None:
    authz.check_superuser(role)


def _tenant_admin(authz: Authorizer, role: str | None, request: web.Request) -> None:
    authz.check_tenant_admin(role, tenant_name(request))


def _list_topics(authz: Authorizer, role: str | None, request: web.Request) -> None:
    authz.check_list_topics(role, str(namespace_name(request)))


def _lookup(authz: Authorizer, role: str | None, request: web.Request) -> None:
    authz.check_lookup(role, topic_name(request))


def _consume(authz: Authorizer, role: str | None, request: web.Request) -> None:
    authz.check_consume(role, topic_name(request))


def rule_for(method: str, path: str) -> Check:
    """The check for a route pattern (``path`` is aiohttp's canonical pattern)."""
    path = path.replace("{namespace}", "{ns}")  # both spellings are in use
    if path == "/admin/v2/brokers/health":
        return _open  # reveals only "ok"; Docker's health check uses it (Pulsar: superuser)
    if path == "/admin/v2/clusters" and method == "GET":
        return _authenticated
    if path.startswith(("/admin/v2/clusters", "/admin/v2/brokers", "/admin/v2/tenants")):
        return _superuser
    if path == "/admin/v2/namespaces/{tenant}":
        return _tenant_admin
    if path == _NAMESPACE + "/topics":
        return _list_topics
    if path.startswith(_NAMESPACE):
        return _tenant_admin  # policies, permissions, create, delete
    if path in (
        "/admin/v2/persistent/{tenant}/{ns}",
        "/admin/v2/persistent/{tenant}/{ns}/partitioned",
    ):
        return _list_topics if method == "GET" else _tenant_admin
    if path.startswith(_TOPIC):
        rest = path[len(_TOPIC) :]
        if method == "GET" and rest in _TOPIC_LOOKUPS:
            return _lookup
        if rest == "/subscriptions" or rest.startswith(("/subscription/", "/all_subscription/")):
            return _consume
        return _tenant_admin  # create, delete, unload, terminate, partitions, topic policies
    if path.startswith("/lookup/v2/topic/"):
        return _lookup
    return _superuser


def _route_pattern(request: web.Request) -> str | None:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else None


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    service = request.app[SERVICE]
    security = service.security
    authn = security.authentication
    pattern = _route_pattern(request)
    if pattern == METRICS_PATH and not service.config.authenticate_metrics_endpoint:
        return await handler(request)
    check = rule_for(request.method, pattern) if pattern is not None else _open
    if check is _open and pattern is not None:
        return await handler(request)
    role = authn.anonymous_role
    if authn.enabled:
        try:
            identity = await authn.authenticate_http(
                request.headers.get("Authorization"), peer_certificate(request.transport)
            )
        except AuthenticationFailure:
            await asyncio.sleep(authn.failure_delay)
            raise AdminError(401, "Authentication required") from None
        role = identity.role
    request[ROLE] = role
    if pattern is not None and pattern != METRICS_PATH:
        check(security.authorizer, role, request)
    return await handler(request)
