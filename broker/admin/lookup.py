"""``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}``: Pulsar's HTTP topic lookup.

A client given ``http://host:port`` as its service URL asks here which broker serves a topic
(after ``GET .../partitions`` for the partition count), then connects to the binary port. One
broker serves everything (standalone), so the answer is this broker's URLs (in cluster mode: the
owner's, or a 307 to the broker that should own it: to its ``https://`` URL when the lookup
came over TLS), as Pulsar's ``LookupData``. The answer carries both binary URLs
(``brokerUrl``, ``brokerUrlTls``), as Pulsar's: the client picks the one of its scheme.
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
from broker.cluster.http import web_url_for


async def lookup_topic(request: web.Request) -> web.Response:
    domain = path_part(request, "domain")
    if domain != "persistent":
        raise AdminError(412, f"only persistent:// topics are supported (got domain {domain!r})")
    name = topic_in_namespace(request)
    service = service_of(request)
    if service.damaged.get(name.full_name) is not None:
        await service.refuse_if_damaged(name)  # raises TopicDamaged while it stays damaged
    if service.cluster is not None:
        # Cluster mode: the owner's URLs, or a 307 to the candidate (Pulsar's HTTP lookup).
        authoritative = request.query.get("authoritative", "false").lower() == "true"
        answer = await service.cluster.lookup(name, authoritative)
        owner = answer.broker
        if answer.redirect:
            url = request.rel_url.update_query({"authoritative": "true"})
            raise web.HTTPTemporaryRedirect(web_url_for(request, owner) + str(url))
        return _lookup_data(
            owner.service_url, owner.service_url_tls, owner.web_url, owner.web_url_tls
        )
    return _lookup_data(
        service.service_url, service.service_url_tls, service.web_url, service.web_url_tls
    )


def _lookup_data(url: str, url_tls: str, http_url: str, http_url_tls: str) -> web.Response:
    return json_response(
        {
            "brokerUrl": url,
            "brokerUrlTls": url_tls,
            "httpUrl": http_url,
            "httpUrlTls": http_url_tls,
            "nativeUrl": url,
        }
    )


def routes() -> list[web.RouteDef]:
    return [web.get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}", lookup_topic)]
