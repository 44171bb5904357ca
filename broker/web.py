"""HTTP admin API on the web port (aiohttp), following Pulsar's REST paths.

Served now: broker health, namespaces, topic listing/stats/unload/delete and the PIP-6
deduplication policies at namespace and topic level (topic > namespace > broker flag), plus the
PIP-68 topic-epoch view in the topic stats. Bodies are JSON as in Pulsar (``true``/``false`` for
the policy POSTs).

Names in the path follow ``protocol.topic_name`` (the binary protocol's rules). Each path segment
is percent-decoded once, as UTF-8; in the topic segment ``+`` also stands for a space, as Pulsar
reads it (``Codec.decode``, i.e. ``URLDecoder``): ``a b`` arrives as ``a+b``, ``a+b`` as ``a%2Bb``.
An invalid tenant, namespace or topic name is refused with 412 Precondition Failed, as Pulsar
does ("Topic name is not valid" / "Namespace name is not valid").
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, unquote_plus

from aiohttp import web

from broker.errors import BrokerError, TopicDamaged
from protocol.topic_name import (
    InvalidTopicNameError,
    NamespaceName,
    TopicName,
    check_tenant_name,
)

if TYPE_CHECKING:
    from broker.server import Broker, BrokerService

log = logging.getLogger(__name__)
_SERVICE: web.AppKey[BrokerService] = web.AppKey("service", object)  # type: ignore[arg-type]
# Every admin route is /admin/v2/<kind>/{tenant}[/{ns}[/{topic}[/...]]]: segment positions.
_PATH_SEGMENT = {"tenant": 4, "ns": 5, "topic": 6}


def _service(request: web.Request) -> BrokerService:
    return request.app[_SERVICE]


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(value, default=str), status=status, content_type="application/json"
    )


def _error(status: int, reason: str) -> web.Response:
    return _json({"reason": reason}, status=status)


async def _read_bool(request: web.Request) -> bool:
    text = (await request.text()).strip().lower()
    if text not in ("true", "false"):
        raise web.HTTPBadRequest(
            text=json.dumps({"reason": "body must be true or false"}),
            content_type="application/json",
        )
    return text == "true"


def _invalid_name(reason: str) -> web.HTTPPreconditionFailed:
    return web.HTTPPreconditionFailed(
        text=json.dumps({"reason": reason}), content_type="application/json"
    )


def _path_part(request: web.Request, key: str) -> str:
    """One path segment, percent-decoded once, as UTF-8 strictly.

    aiohttp's ``match_info`` leaves an escape that is not UTF-8 (``%FF``) as literal text, which
    would turn a malformed request into a different, valid name; so decode the raw segment."""
    raw = request.rel_url.raw_path.split("/")[_PATH_SEGMENT[key]]
    decode = unquote_plus if key == "topic" else unquote
    try:
        return decode(raw, errors="strict")
    except UnicodeDecodeError as exc:
        raise _invalid_name(f"{key}: percent-encoding is not UTF-8 in {raw!r}") from exc


def _topic(request: web.Request) -> TopicName:
    tenant, ns, topic = (_path_part(request, key) for key in ("tenant", "ns", "topic"))
    try:
        return TopicName(tenant, ns, topic)
    except InvalidTopicNameError as exc:
        raise _invalid_name(f"Topic name is not valid: {exc}") from exc


def _namespace_name(request: web.Request) -> NamespaceName:
    tenant, ns = _path_part(request, "tenant"), _path_part(request, "ns")
    try:
        return NamespaceName(tenant, ns)
    except InvalidTopicNameError as exc:
        raise _invalid_name(f"Namespace name is not valid: {exc}") from exc


def _namespace(request: web.Request) -> str:
    """The namespace of the path: 412 if its name is invalid, 404 if it does not exist."""
    namespace = _namespace_name(request)
    if not _service(request).policies.has_namespace(str(namespace)):
        raise web.HTTPNotFound(
            text=json.dumps({"reason": "Namespace does not exist"}),
            content_type="application/json",
        )
    return str(namespace)


# ---------------------------------------------------------------------------- handlers


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def list_tenants(request: web.Request) -> web.Response:
    return _json(_service(request).policies.tenants())


async def list_namespaces(request: web.Request) -> web.Response:
    tenant = _path_part(request, "tenant")
    try:
        check_tenant_name(tenant)
    except InvalidTopicNameError as exc:
        raise _invalid_name(f"Tenant name is not valid: {exc}") from exc
    return _json(
        sorted(n for n in _service(request).policies.namespaces if n.startswith(tenant + "/"))
    )


async def create_namespace(request: web.Request) -> web.Response:
    namespace = str(_namespace_name(request))
    if not await _service(request).policies.create_namespace(namespace):
        return _error(409, "Namespace already exists")
    return web.Response(status=204)


async def list_topics(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return _json(_service(request).topics_of_namespace(NamespaceName.parse(namespace)))


async def get_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    value = _service(request).policies.namespace_dedup.get(namespace)
    return _json(value)


async def set_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    enabled = await _read_bool(request)
    service = _service(request)
    await service.policies.set_namespace_dedup(namespace, enabled)
    await _apply_dedup_policies(service, namespace)
    return web.Response(status=204)


async def remove_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    service = _service(request)
    await service.policies.set_namespace_dedup(namespace, None)
    await _apply_dedup_policies(service, namespace)
    return web.Response(status=204)


async def get_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    return _json(_service(request).policies.topic_dedup.get(topic.full_name))


async def set_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    enabled = await _read_bool(request)
    service = _service(request)
    await service.policies.set_topic_dedup(topic.full_name, enabled)
    await _apply_dedup_policies(service, topic.namespace_name)
    return web.Response(status=204)


async def remove_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    service = _service(request)
    await service.policies.set_topic_dedup(topic.full_name, None)
    await _apply_dedup_policies(service, topic.namespace_name)
    return web.Response(status=204)


async def _apply_dedup_policies(service: BrokerService, namespace: str) -> None:
    """Re-resolve the effective dedup flag of every loaded topic of ``namespace``.

    The policy is stored (atomic write + fsync, in a disk thread so the loop keeps serving)
    before it is applied, so a crash in between leaves it to be applied at the next load."""
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == namespace:
            await topic.set_dedup_enabled(service.dedup_enabled_for(topic.name))


async def topic_stats(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    if not service.topic_exists(name):
        return _error(404, "Topic not found")
    try:
        topic = await service.get_topic(name, create=False)
    except TopicDamaged as exc:
        # Pulsar answers 500 for a topic whose managed ledger fails to open.
        return _json({"reason": exc.message, "damaged": exc.damage}, status=500)
    except BrokerError as exc:
        return _error(404, str(exc))
    return _json(topic.stats_snapshot())


async def unload_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    await _service(request).unload_topic(name)
    return web.Response(status=204)


async def delete_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    if not service.topic_exists(name):
        return _error(404, "Topic not found")
    await service.delete_topic(name)
    return web.Response(status=204)


def build_app(service: BrokerService) -> web.Application:
    app = web.Application()
    app[_SERVICE] = service
    topic = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
    namespace = "/admin/v2/namespaces/{tenant}/{ns}"
    app.add_routes(
        [
            web.get("/admin/v2/brokers/health", health),
            web.get("/admin/v2/tenants", list_tenants),
            web.get("/admin/v2/namespaces/{tenant}", list_namespaces),
            web.put(namespace, create_namespace),
            web.get(namespace + "/deduplication", get_namespace_dedup),
            web.post(namespace + "/deduplication", set_namespace_dedup),
            web.delete(namespace + "/deduplication", remove_namespace_dedup),
            web.get("/admin/v2/persistent/{tenant}/{ns}", list_topics),
            web.get(topic + "/deduplicationEnabled", get_topic_dedup),
            web.post(topic + "/deduplicationEnabled", set_topic_dedup),
            web.delete(topic + "/deduplicationEnabled", remove_topic_dedup),
            web.get(topic + "/stats", topic_stats),
            web.put(topic + "/unload", unload_topic),
            web.delete(topic, delete_topic),
        ]
    )
    return app


async def start_web_server(broker: Broker, service: BrokerService) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(build_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, broker.config.bind_address, broker.config.web_service_port)
    await site.start()
    # aiohttp exposes the bound (maybe ephemeral) port only through its server's sockets.
    server = cast(asyncio.Server | None, site._server)
    port = server.sockets[0].getsockname()[1] if server is not None and server.sockets else 0
    return runner, port


async def stop_web_server(runner: object | None) -> None:
    if isinstance(runner, web.AppRunner):
        await runner.cleanup()
