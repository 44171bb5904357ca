"""HTTP admin API on the web port (aiohttp), following Pulsar's REST paths.

Served now: broker health, namespaces, topic listing/stats/unload/delete and the PIP-6
deduplication policies at namespace and topic level (topic > namespace > broker flag), plus the
PIP-68 topic-epoch view in the topic stats. Bodies are JSON as in Pulsar (``true``/``false`` for
the policy POSTs).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web

from broker.errors import BrokerError
from protocol.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from broker.server import Broker, BrokerService

log = logging.getLogger(__name__)
_SERVICE: web.AppKey[BrokerService] = web.AppKey("service", object)  # type: ignore[arg-type]


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


def _topic(request: web.Request) -> TopicName:
    m = request.match_info
    try:
        return TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")
    except InvalidTopicNameError as exc:
        raise web.HTTPBadRequest(
            text=json.dumps({"reason": str(exc)}), content_type="application/json"
        ) from exc


def _namespace(request: web.Request) -> str:
    namespace = f"{request.match_info['tenant']}/{request.match_info['ns']}"
    if not _service(request).policies.has_namespace(namespace):
        raise web.HTTPNotFound(
            text=json.dumps({"reason": "Namespace does not exist"}),
            content_type="application/json",
        )
    return namespace


# ---------------------------------------------------------------------------- handlers


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def list_tenants(request: web.Request) -> web.Response:
    return _json(_service(request).policies.tenants())


async def list_namespaces(request: web.Request) -> web.Response:
    tenant = request.match_info["tenant"]
    return _json(
        sorted(n for n in _service(request).policies.namespaces if n.startswith(tenant + "/"))
    )


async def create_namespace(request: web.Request) -> web.Response:
    namespace = f"{request.match_info['tenant']}/{request.match_info['ns']}"
    if not _service(request).policies.create_namespace(namespace):
        return _error(409, "Namespace already exists")
    return web.Response(status=204)


async def list_topics(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return _json(_service(request).topics_of_namespace(namespace))


async def get_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    value = _service(request).policies.namespace_dedup.get(namespace)
    return _json(value)


async def set_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    enabled = await _read_bool(request)
    service = _service(request)
    await asyncio.to_thread(service.policies.set_namespace_dedup, namespace, enabled)
    await _apply_dedup_policies(service, namespace)
    return web.Response(status=204)


async def remove_namespace_dedup(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    service = _service(request)
    await asyncio.to_thread(service.policies.set_namespace_dedup, namespace, None)
    await _apply_dedup_policies(service, namespace)
    return web.Response(status=204)


async def get_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    return _json(_service(request).policies.topic_dedup.get(topic.full_name))


async def set_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    enabled = await _read_bool(request)
    service = _service(request)
    await asyncio.to_thread(service.policies.set_topic_dedup, topic.full_name, enabled)
    await _apply_dedup_policies(service, topic.namespace_name)
    return web.Response(status=204)


async def remove_topic_dedup(request: web.Request) -> web.Response:
    topic = _topic(request)
    service = _service(request)
    await asyncio.to_thread(service.policies.set_topic_dedup, topic.full_name, None)
    await _apply_dedup_policies(service, topic.namespace_name)
    return web.Response(status=204)


async def _apply_dedup_policies(service: BrokerService, namespace: str) -> None:
    """Re-resolve the effective dedup flag of every loaded topic of ``namespace``.

    The policy is stored (atomic write + fsync, in a worker thread so the loop keeps serving)
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
