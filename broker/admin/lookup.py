"""``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}``: Pulsar's HTTP topic lookup.

A client given ``http://host:port`` as its service URL asks here which broker serves a topic
(after ``GET .../partitions`` for the partition count), then connects to the binary port. One
broker serves everything, so the answer is this broker's URLs, as Pulsar's ``LookupData``.
Only ``persistent`` topics exist here: any other domain is refused as the binary lookup does.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin.common import (
    AdminError,
    json_response,
    path_part,
    service_of,
    topic_in_namespace,
)


async def lookup_topic(request: web.Request) -> web.Response:
    domain = path_part(request, "domain")
    if domain != "persistent":
        raise AdminError(412, f"only persistent:// topics are supported (got domain {domain!r})")
    name = topic_in_namespace(request)
    service = service_of(request)
    if service.damaged.get(name.full_name) is not None:
        await service.refuse_if_damaged(name)  # raises TopicDamaged while it stays damaged
    return json_response(
        {
            "brokerUrl": service.service_url,
            "brokerUrlTls": service.service_url_tls,
            "httpUrl": service.web_url,
            "httpUrlTls": service.web_url_tls,
            "nativeUrl": service.service_url,
        }
    )


def routes() -> list[web.RouteDef]:
    return [web.get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}", lookup_topic)]
