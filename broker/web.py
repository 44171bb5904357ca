"""HTTP server on the web port (aiohttp, same process and event loop as the broker).

``build_app`` mounts the admin REST API of ``broker/admin/`` (Pulsar's ``/admin/v2`` paths and
JSON, one module per resource: tenants and clusters, namespaces, topics, partitioned topics,
subscriptions, the HTTP lookup) behind the middleware that turns every failure into Pulsar's
``{"reason": ...}`` with its status code, plus ``GET /metrics`` (``broker/metrics.py``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from aiohttp import web

from broker.admin import SERVICE, json_errors, routes
from broker.auth.http import security_middleware
from broker.cluster.http import owner_redirect
from broker.cluster.http import routes as cluster_routes
from broker.metrics import add_metrics_route
from broker.tls import server_ssl_context

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.service import BrokerService


def build_app(service: BrokerService) -> web.Application:
    # json_errors outermost: authentication and authorization refusals get Pulsar's JSON shape.
    # owner_redirect innermost: cluster mode's 307 to a topic's owner, once authorized.
    app = web.Application(middlewares=[json_errors, security_middleware, owner_redirect])
    app[SERVICE] = service
    add_metrics_route(app, service)  # GET /metrics (Prometheus), see broker/metrics.py
    app.add_routes(routes())
    app.add_routes(cluster_routes())  # bundles, bundle unload, brokers (broker/cluster/http.py)
    return app


async def start_web_server(
    config: BrokerConfig, service: BrokerService
) -> tuple[web.AppRunner, int, int]:
    """Serve the app on ``webServicePort`` and/or ``webServicePortTls``; returns the runner and
    the bound ports (0 for a port not served)."""
    runner = web.AppRunner(build_app(service), access_log=None)
    await runner.setup()
    port = tls_port = 0
    if config.web_service_port_enabled:
        port = await _start_site(web.TCPSite(runner, config.bind_address, config.web_service_port))
    if config.web_service_port_tls >= 0:
        site = web.TCPSite(
            runner,
            config.bind_address,
            config.web_service_port_tls,
            ssl_context=server_ssl_context(config),
        )
        tls_port = await _start_site(site)
    return runner, port, tls_port


async def _start_site(site: web.TCPSite) -> int:
    await site.start()
    # aiohttp exposes the bound (maybe ephemeral) port only through its server's sockets.
    server = cast(asyncio.Server | None, site._server)
    return server.sockets[0].getsockname()[1] if server is not None and server.sockets else 0


async def stop_web_server(runner: object | None) -> None:
    if isinstance(runner, web.AppRunner):
        await runner.cleanup()
