"""REST for the idempotency-key window policy (issue #16), shaped like the dedup policy.

``GET|POST|DELETE /admin/v2/namespaces/{tenant}/{ns}/idempotencyWindow`` and
``GET|POST|DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/idempotencyWindow``. The body is
``{"idempotencyWindowSeconds": int >= 0, "idempotencyWindowMaxKeys": int >= 1}`` (either field
may be left out: it then comes from the next level). Resolution per field: topic, namespace,
broker settings (``idempotencyWindowSeconds`` / ``idempotencyWindowMaxKeys``). The policy is
stored durably before it is applied to the loaded topics of the namespace (a crash in between
leaves it to the next load), as the dedup policy is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import (
    AdminError,
    existing_namespace,
    json_response,
    no_content,
    read_json,
    service_of,
    topic_in_namespace,
)
from broker.metadata.policies import IDEMPOTENCY_WINDOW
from broker.publish.idempotency_snapshot import window_config_for

if TYPE_CHECKING:
    from broker.service import BrokerService

__all__ = ["routes"]

NAMESPACE = "/admin/v2/namespaces/{tenant}/{ns}"
TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
_FIELDS = {"idempotencyWindowSeconds": 0, "idempotencyWindowMaxKeys": 1}


def window_body(document: Any) -> dict[str, int]:
    """The policy JSON, validated (400 otherwise); at least one known field."""
    if not isinstance(document, dict) or not document:
        raise AdminError(400, f"Request body must be a JSON object with any of {list(_FIELDS)}")
    policy: dict[str, int] = {}
    for key, value in document.items():
        if key not in _FIELDS:
            raise AdminError(400, f"Unknown field {key!r}; expected any of {list(_FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < _FIELDS[key]:
            raise AdminError(400, f"{key} must be an integer >= {_FIELDS[key]}, got {value!r}")
        policy[key] = value
    return policy


async def apply_window_policies(service: BrokerService, namespace: str) -> None:
    """Re-resolve the window settings of every loaded topic of ``namespace``."""
    for topic in list(service.topics.values()):
        window = topic.idempotency
        if window is not None and topic.name.namespace_name == namespace:
            window.reconfigure(window_config_for(service.config, service.policies, topic.name))


async def get_namespace_window(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    policies = service_of(request).policies
    return json_response(policies.namespace_policy(namespace, IDEMPOTENCY_WINDOW))


async def set_namespace_window(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    policy = window_body(await read_json(request))
    service = service_of(request)
    await service.policies.set_namespace_policy(namespace, IDEMPOTENCY_WINDOW, policy)
    await apply_window_policies(service, namespace)
    return no_content()


async def remove_namespace_window(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    service = service_of(request)
    await service.policies.set_namespace_policy(namespace, IDEMPOTENCY_WINDOW, None)
    await apply_window_policies(service, namespace)
    return no_content()


async def get_topic_window(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    policies = service_of(request).policies
    return json_response(policies.topic_policy(name.full_name, IDEMPOTENCY_WINDOW))


async def set_topic_window(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    policy = window_body(await read_json(request))
    service = service_of(request)
    await service.policies.set_topic_policy(name.full_name, IDEMPOTENCY_WINDOW, policy)
    await apply_window_policies(service, name.namespace_name)
    return no_content()


async def remove_topic_window(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    await service.policies.set_topic_policy(name.full_name, IDEMPOTENCY_WINDOW, None)
    await apply_window_policies(service, name.namespace_name)
    return no_content()


def routes() -> list[web.RouteDef]:
    return [
        web.get(NAMESPACE + "/idempotencyWindow", get_namespace_window),
        web.post(NAMESPACE + "/idempotencyWindow", set_namespace_window),
        web.delete(NAMESPACE + "/idempotencyWindow", remove_namespace_window),
        web.get(TOPIC + "/idempotencyWindow", get_topic_window),
        web.post(TOPIC + "/idempotencyWindow", set_topic_window),
        web.delete(TOPIC + "/idempotencyWindow", remove_topic_window),
    ]
