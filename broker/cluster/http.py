"""Cluster mode on the web port: 307 redirects to a topic's owner, bundles and brokers.

* ``owner_redirect``: an admin call on ``/admin/v2/persistent/{tenant}/{ns}/{topic}/...``
  reaching a broker that does not own the topic's bundle is answered ``307 Temporary Redirect``
  to the same path on the owner's web URL (Pulsar's ``validateTopicOwnership``); an unowned
  bundle is first placed, as a lookup does. Partitioned-topic metadata (``.../partitions``) is
  shared and answered anywhere.
* ``GET /admin/v2/namespaces/{tenant}/{ns}/bundles``: Pulsar's ``BundlesData``.
* ``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload[?destinationBroker=host:port]``:
  the owner closes the bundle's topics and releases it (others redirect there); the next
  lookup places it on the destination, else on another live broker than the former owner.
* ``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split[?unload=true]
  [&splitAlgorithmName=range_equally_divide|topic_count_equally_divide]``: the owner splits the
  bundle (Pulsar's bundle split); with ``unload`` the pieces are placed by load, else they stay.
* ``GET /admin/v2/brokers/{cluster}``: the live brokers' ids.
* ``GET /admin/v2/broker-stats/load-report``: this broker's load report as last published
  (Pulsar's ``LocalBrokerData`` fields; ``load.py``).

Every 307 goes to the target's ``https://`` URL when the request came over TLS (Pulsar's
``isRequestHttps()``), else to its ``http://`` one: a client that chose TLS, and sends its
credentials over it, is never sent to plain text (no TLS URL: 412, as Pulsar answers). A plain
request goes to the plain URL, or to the TLS one of a broker without a plain web port.

Standalone, none of this redirects; a bundle unload unloads the loaded topics of the range.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.admin.common import (
    AdminError,
    json_response,
    no_content,
    path_part,
    service_of,
    topic_in_namespace,
)
from broker.cluster.bundles import Bundle, bundle_of, bundles_of, parse_bundle_range
from broker.cluster.membership import BrokerInfo
from broker.cluster.split import ALGORITHMS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_TOPIC_ROUTE = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
_SHARED_SUFFIXES = ("/partitions", "/partitioned-stats")


def web_url_for(request: web.Request, broker: BrokerInfo) -> str:
    """Where to send ``request`` on ``broker``: its TLS web URL if the request came over TLS."""
    if request.secure:
        if not broker.web_url_tls:
            raise AdminError(
                412, f"broker {broker.broker_id} has no TLS web service URL to redirect to"
            )
        return broker.web_url_tls
    return broker.web_url or broker.web_url_tls


@web.middleware
async def owner_redirect(request: web.Request, handler: Handler) -> web.StreamResponse:
    service = service_of(request)
    cluster = service.cluster
    resource = request.match_info.route.resource
    pattern = resource.canonical if resource is not None else ""
    if (
        cluster is None
        or not pattern.startswith(_TOPIC_ROUTE)
        or pattern == _TOPIC_ROUTE + "/partitions"
        or pattern.endswith(_SHARED_SUFFIXES)
    ):
        return await handler(request)
    topic = topic_in_namespace(request)
    authoritative = request.query.get("authoritative", "false").lower() == "true"
    answer = await cluster.lookup(topic, authoritative)
    if answer.broker.broker_id == cluster.me.broker_id:
        return await handler(request)
    target = web_url_for(request, answer.broker)
    url = request.rel_url.update_query({"authoritative": "true"}) if answer.redirect else None
    raise web.HTTPTemporaryRedirect(target + str(url or request.rel_url))


def _bundles(request: web.Request, namespace: str) -> list[Bundle]:
    """The namespace's bundles: as split so far in cluster mode, else the default ranges."""
    service = service_of(request)
    if service.cluster is not None:
        return service.cluster.boundaries.bundles(namespace)
    return bundles_of(namespace, service.config.default_number_of_namespace_bundles)


async def list_bundles(request: web.Request) -> web.Response:
    namespace = f"{path_part(request, 'tenant')}/{path_part(request, 'ns')}"
    ranges = _bundles(request, namespace)
    boundaries = [f"0x{b.lower:08x}" for b in ranges] + [f"0x{ranges[-1].upper:08x}"]
    return json_response({"boundaries": boundaries, "numBundles": len(ranges)})


def _bundle_in_path(request: web.Request) -> Bundle:
    """The path's bundle of an existing namespace: 404 / 412 otherwise (as Pulsar)."""
    namespace = f"{path_part(request, 'tenant')}/{path_part(request, 'ns')}"
    if not service_of(request).policies.has_namespace(namespace):
        raise AdminError(404, "Namespace does not exist")
    try:
        bundle = parse_bundle_range(namespace, path_part(request, "bundle"))
    except ValueError as exc:
        raise AdminError(412, str(exc)) from exc
    if bundle not in _bundles(request, namespace):
        raise AdminError(412, f"{bundle.name} is not a bundle of {namespace}")
    return bundle


async def unload_bundle(request: web.Request) -> web.Response:
    service = service_of(request)
    bundle = _bundle_in_path(request)
    count = service.config.default_number_of_namespace_bundles
    cluster = service.cluster
    if cluster is None:
        for topic in [t.name for t in service.topics.values()]:
            if bundle_of(topic, count) == bundle:
                await service.unload_topic(topic)
        return no_content()
    destination = request.query.get("destinationBroker", "")
    if destination and destination not in {b.broker_id for b in await cluster.brokers()}:
        raise AdminError(412, f"destination broker {destination} is not alive")
    if await cluster.unload(bundle, move_to=destination):
        return no_content()
    found = await cluster.owner_of(bundle)
    if found is None or found[0].broker_id == cluster.me.broker_id:
        return no_content()  # nobody owns it: nothing to unload (Pulsar answers 204 too)
    raise web.HTTPTemporaryRedirect(web_url_for(request, found[0]) + str(request.rel_url))


async def split_bundle(request: web.Request) -> web.Response:
    service = service_of(request)
    bundle = _bundle_in_path(request)
    cluster = service.cluster
    if cluster is None or cluster.balancer is None:
        raise AdminError(412, "bundles are split in cluster mode only")
    algorithm = request.query.get(
        "splitAlgorithmName", service.config.default_namespace_bundle_split_algorithm
    )
    if algorithm not in ALGORITHMS:
        raise AdminError(412, f"unsupported namespace bundle split algorithm {algorithm!r}")
    unload = request.query.get("unload", "false").lower() == "true"
    if cluster.epoch_of(bundle) is None:
        found = await cluster.owner_of(bundle)
        if found is None or found[0].broker_id == cluster.me.broker_id:
            raise AdminError(412, f"bundle {bundle.name} is not owned by any broker")
        raise web.HTTPTemporaryRedirect(web_url_for(request, found[0]) + str(request.rel_url))
    if not await cluster.balancer.split(bundle, algorithm, unload):
        raise AdminError(412, f"bundle {bundle.name} cannot be split (fewer than 2 topics?)")
    return no_content()


async def list_brokers(request: web.Request) -> web.Response:
    service = service_of(request)
    if path_part(request, "cluster") != service.config.cluster_name:
        raise AdminError(404, "Cluster does not exist")
    if service.cluster is None:
        return json_response([service.web_url.split("://", 1)[-1]])
    return json_response(sorted(b.broker_id for b in await service.cluster.brokers()))


async def load_report(request: web.Request) -> web.Response:
    cluster = service_of(request).cluster
    if cluster is None or cluster.balancer is None:
        raise AdminError(412, "load reports exist in cluster mode only")
    report = cluster.balancer.last_report
    if report is None:
        raise AdminError(404, "no load report published yet")
    return web.Response(body=report.encode(), content_type="application/json")


def routes() -> list[web.RouteDef]:
    namespace = "/admin/v2/namespaces/{tenant}/{ns}"
    return [
        web.get(namespace + "/bundles", list_bundles),
        web.put(namespace + "/{bundle}/unload", unload_bundle),
        web.put(namespace + "/{bundle}/split", split_bundle),
        web.get("/admin/v2/brokers/{cluster}", list_brokers),
        web.get("/admin/v2/broker-stats/load-report", load_report),
    ]
