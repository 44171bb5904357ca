"""The admin REST API (aiohttp), one module per resource, mounted by ``broker.web.build_app``.

``routes()`` lists every route; ``json_errors`` is the middleware that gives every failure
Pulsar's shape, a status code and ``{"reason": ...}``: an ``AdminError`` as raised, aiohttp's own
errors (unknown path 404, wrong method 405) with their reason, a ``BrokerError`` with the status
Pulsar uses for it, anything else as 500 with a generic reason and an error id: exception text
can hold file paths and internals, so it goes to the log only, under that id, for the operator to
find (``TopicDamaged`` is the exception: its reason and location are the operator's diagnosis).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.admin import (
    idempotency,
    lookup,
    namespaces,
    partitions,
    permissions,
    subscriptions,
    tenants,
    topics,
)
from broker.admin.common import SERVICE, AdminError, json_response
from broker.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerError,
    NotAllowed,
    ServiceNotReady,
    SubscriptionNotFound,
    TopicDamaged,
    TopicNotFound,
)

__all__ = ["SERVICE", "json_errors", "routes"]

log = logging.getLogger(__name__)

_BROKER_ERROR_STATUS: tuple[tuple[type[BrokerError], int], ...] = (
    (TopicDamaged, 500),  # Pulsar: the managed ledger failed to open
    (TopicNotFound, 404),
    (SubscriptionNotFound, 404),
    (ServiceNotReady, 503),
    (NotAllowed, 409),
    (AuthenticationError, 401),
    (AuthorizationError, 403),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes() -> list[web.RouteDef]:
    # Partitioned-topic routes first: ".../{ns}/partitioned" must not read as a topic name.
    return [
        *tenants.routes(),
        *namespaces.routes(),
        *permissions.routes(),
        *partitions.routes(),
        *idempotency.routes(),  # issue #16: before topics' routes
        *topics.routes(),
        *subscriptions.routes(),
        *lookup.routes(),
    ]


def _broker_error_status(exc: BrokerError) -> int:
    for kind, status in _BROKER_ERROR_STATUS:
        if isinstance(exc, kind):
            return status
    return 500


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AdminError as exc:
        return json_response(exc.body(), exc.status)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        return json_response({"reason": exc.reason}, exc.status)
    except TopicDamaged as exc:
        return json_response({"reason": exc.message, "damaged": exc.damage}, 500)
    except BrokerError as exc:
        status = _broker_error_status(exc)
        if status == 500:
            return _internal_error(request, exc)
        return json_response({"reason": str(exc)}, status)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        return _internal_error(request, exc)


def _internal_error(request: web.Request, exc: BaseException) -> web.Response:
    """500 with a reason that tells nothing of the failure but its id; the log has the rest."""
    error_id = secrets.token_hex(8)
    log.error(
        "admin request %s %s failed (error id %s)",
        request.method,
        request.path,
        error_id,
        exc_info=exc,
    )
    reason = f"Internal server error (error id {error_id}); the broker log has the details"
    return json_response({"reason": reason, "errorId": error_id}, 500)
