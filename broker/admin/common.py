"""What every admin resource shares: the service handle, names from the path, bodies, errors.

Errors follow Pulsar's REST conventions: a status code and a ``{"reason": ...}`` body. Handlers
raise ``AdminError``; the middleware in ``broker.admin`` turns it, aiohttp's own HTTP errors
(unknown path, wrong method) and anything unexpected into that shape, never a stack trace.

Names in the path follow ``protocol.topic_name`` (the binary protocol's rules). Each path segment
is percent-decoded once, as UTF-8; in the topic and subscription segments ``+`` also stands for a
space, as Pulsar reads them (``Codec.decode``, i.e. ``URLDecoder``): ``a b`` arrives as ``a+b``,
``a+b`` as ``a%2Bb``. An invalid tenant, namespace or topic name is refused with 412
Precondition Failed, as Pulsar does ("Topic name is not valid" / "Namespace name is not valid").
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, unquote_plus

from aiohttp import web

from protocol.topic_name import InvalidTopicNameError, NamespaceName, TopicName, check_tenant_name

if TYPE_CHECKING:
    from broker.service import BrokerService
    from broker.topics.topic import Topic

SERVICE: web.AppKey[BrokerService] = web.AppKey("service", object)  # type: ignore[arg-type]
_PLUS_IS_SPACE = frozenset({"topic", "subscription"})


class AdminError(Exception):
    """An admin request that fails with ``status`` and a reason for the operator."""

    def __init__(self, status: int, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"reason": self.reason, **self.extra}


def service_of(request: web.Request) -> BrokerService:
    return request.app[SERVICE]


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(value, default=str), status=status, content_type="application/json"
    )


def no_content() -> web.Response:
    return web.Response(status=204)


# ---------------------------------------------------------------------------- path parts


def path_part(request: web.Request, key: str) -> str:
    """One path segment, percent-decoded once, as UTF-8 strictly.

    aiohttp's ``match_info`` leaves an escape that is not UTF-8 (``%FF``) as literal text, which
    would turn a malformed request into a different, valid name; so decode the raw segment,
    found at the position of ``{key}`` in the route's pattern."""
    pattern = request.match_info.route.resource
    canonical = pattern.canonical if pattern is not None else ""
    index = canonical.split("/").index("{" + key + "}")
    raw = request.rel_url.raw_path.split("/")[index]
    decode = unquote_plus if key in _PLUS_IS_SPACE else unquote
    try:
        return decode(raw, errors="strict")
    except UnicodeDecodeError as exc:
        raise AdminError(412, f"{key}: percent-encoding is not UTF-8 in {raw!r}") from exc


def tenant_name(request: web.Request) -> str:
    tenant = path_part(request, "tenant")
    try:
        check_tenant_name(tenant)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Tenant name is not valid: {exc}") from exc
    return tenant


def existing_tenant(request: web.Request) -> str:
    tenant = tenant_name(request)
    if tenant not in service_of(request).policies.tenants():
        raise AdminError(404, f"Tenant {tenant} does not exist")
    return tenant


def namespace_name(request: web.Request) -> NamespaceName:
    tenant, ns = path_part(request, "tenant"), path_part(request, "ns")
    try:
        return NamespaceName(tenant, ns)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Namespace name is not valid: {exc}") from exc


def existing_namespace(request: web.Request) -> str:
    """The namespace of the path: 412 if its name is invalid, 404 if it does not exist."""
    namespace = str(namespace_name(request))
    if not service_of(request).policies.has_namespace(namespace):
        raise AdminError(404, "Namespace does not exist")
    return namespace


def topic_name(request: web.Request) -> TopicName:
    """The topic of the path (412 if invalid); its namespace must exist (404)."""
    tenant, ns, topic = (path_part(request, key) for key in ("tenant", "ns", "topic"))
    try:
        name = TopicName(tenant, ns, topic)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Topic name is not valid: {exc}") from exc
    return name


def topic_in_namespace(request: web.Request) -> TopicName:
    name = topic_name(request)
    if not service_of(request).policies.has_namespace(name.namespace_name):
        raise AdminError(404, "Namespace does not exist")
    return name


def subscription_name(request: web.Request) -> str:
    name = path_part(request, "subscription")
    if not name:
        raise AdminError(412, "Subscription name is empty")
    return name


def is_partitioned(service: BrokerService, name: TopicName) -> bool:
    return not name.is_partition and service.partitioned.partitions(name.full_name) > 0


async def loaded_topic(request: web.Request, name: TopicName) -> Topic:
    """The topic (loaded now if needed), 404 if it does not exist."""
    service = service_of(request)
    if not service.topic_exists(name):
        raise AdminError(404, f"Topic {name.full_name} not found")
    return await service.get_topic(name, create=False)


# ---------------------------------------------------------------------------- bodies


async def read_json(request: web.Request) -> Any:
    text = await request.text()
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise AdminError(400, f"Request body is not valid JSON: {exc}") from exc


async def read_bool(request: web.Request) -> bool:
    text = (await request.text()).strip().lower()
    if text not in ("true", "false"):
        raise AdminError(400, "body must be true or false")
    return text == "true"


async def read_int(request: web.Request, what: str) -> int:
    value = await read_json(request)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError(400, f"{what} must be an integer, got {value!r}")
    return value


def int_field(document: Any, key: str, *, minimum: int) -> int:
    """``document[key]`` as an integer >= ``minimum`` (400 otherwise)."""
    if not isinstance(document, dict):
        raise AdminError(400, f"Request body must be a JSON object with {key!r}")
    value = document.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AdminError(400, f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_int(text: str | None, what: str, *, minimum: int, status: int = 400) -> int:
    """A decimal integer from the path or query (ASCII digits only: ``int`` would take "²"
    apart differently than ``str.isdigit`` admits it), at least ``minimum``."""
    if text is None or re.fullmatch(r"-?[0-9]{1,19}", text) is None or int(text) < minimum:
        raise AdminError(status, f"{what} must be an integer >= {minimum}, got {text!r}")
    return int(text)


def query_bool(request: web.Request, key: str, default: bool = False) -> bool:
    value = request.query.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise AdminError(400, f"query parameter {key} must be true or false, got {value!r}")
    return value.lower() == "true"
