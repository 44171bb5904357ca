"""``/admin/v2/tenants[/{tenant}]`` and ``/admin/v2/clusters``: the standalone cluster's tenants.

There is one cluster (``clusterName``, ``standalone`` by default). A tenant's ``TenantInfo``
(``adminRoles``, ``allowedClusters``) comes from the ``PUT`` (create) or ``POST`` (update) body
and is kept with the authorization metadata (``broker/auth/store.py``); a body naming another
cluster is refused (412, as Pulsar refuses clusters it does not know). ``PUT`` of the cluster
itself answers 409 (it exists, as in standalone Pulsar); ``POST`` (update) accepts a
``ClusterData`` body but the URLs stay the ones the broker serves.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin.common import (
    AdminError,
    existing_tenant,
    json_response,
    no_content,
    path_part,
    read_json,
    service_of,
    tenant_name,
)


def _tenant_info(request: web.Request, tenant: str) -> dict[str, object]:
    service = service_of(request)
    return service.security.store.tenant_info(tenant, service.config.cluster_name)


async def _tenant_info_body(request: web.Request) -> tuple[list[str], list[str]]:
    """``(adminRoles, allowedClusters)`` of a ``TenantInfo`` body (both empty without one)."""
    if not (await request.text()).strip():
        return [], []
    info = await read_json(request)
    if not isinstance(info, dict):
        raise AdminError(400, "Body must be a TenantInfo JSON object")
    roles, clusters = info.get("adminRoles") or [], info.get("allowedClusters") or []
    if not all(
        isinstance(v, list) and all(isinstance(x, str) for x in v) for v in (roles, clusters)
    ):
        raise AdminError(400, "adminRoles and allowedClusters must be lists of strings")
    cluster = service_of(request).config.cluster_name
    unknown = sorted(set(clusters) - {cluster})
    if unknown:
        raise AdminError(412, f"Clusters do not exist: {', '.join(map(str, unknown))}")
    return roles, clusters


async def list_tenants(request: web.Request) -> web.Response:
    return json_response(service_of(request).policies.tenants())


async def get_tenant(request: web.Request) -> web.Response:
    tenant = existing_tenant(request)
    return json_response(_tenant_info(request, tenant))


async def create_tenant(request: web.Request) -> web.Response:
    tenant = tenant_name(request)
    roles, clusters = await _tenant_info_body(request)
    service = service_of(request)
    if tenant in service.policies.tenants():
        raise AdminError(409, "Tenant already exists")
    await service.security.store.set_tenant(tenant, roles, clusters)
    await service.policies.create_tenant(tenant)
    return no_content()


async def update_tenant(request: web.Request) -> web.Response:
    tenant = existing_tenant(request)
    roles, clusters = await _tenant_info_body(request)
    await service_of(request).security.store.set_tenant(tenant, roles, clusters)
    return no_content()


async def delete_tenant(request: web.Request) -> web.Response:
    tenant = existing_tenant(request)
    policies = service_of(request).policies
    if any(ns.startswith(tenant + "/") for ns in policies.namespaces):
        raise AdminError(409, "The tenant still has active namespaces")
    await policies.delete_tenant(tenant)
    await service_of(request).security.store.forget_tenant(tenant)
    return no_content()


# ---------------------------------------------------------------------------- clusters


async def list_clusters(request: web.Request) -> web.Response:
    return json_response([service_of(request).config.cluster_name])


async def get_cluster(request: web.Request) -> web.Response:
    service = service_of(request)
    cluster = path_part(request, "cluster")
    if cluster != service.config.cluster_name:
        raise AdminError(404, "Cluster does not exist")
    return json_response(
        {
            "serviceUrl": service.web_url,
            "brokerServiceUrl": service.service_url,
            "serviceUrlTls": service.web_url_tls,
            "brokerServiceUrlTls": service.service_url_tls,
        }
    )


async def create_cluster(request: web.Request) -> web.Response:
    """Standalone Pulsar has its cluster from the start: creating it again is a conflict."""
    cluster = path_part(request, "cluster")
    if cluster == service_of(request).config.cluster_name:
        raise AdminError(409, "Cluster already exists")
    raise AdminError(412, f"Only the cluster {service_of(request).config.cluster_name!r} exists")


async def update_cluster(request: web.Request) -> web.Response:
    cluster = path_part(request, "cluster")
    if cluster != service_of(request).config.cluster_name:
        raise AdminError(404, "Cluster does not exist")
    if not isinstance(await read_json(request), dict):
        raise AdminError(400, "Body must be a ClusterData JSON object")
    return no_content()


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/v2/brokers/health", health),
        web.get("/admin/v2/clusters", list_clusters),
        web.get("/admin/v2/clusters/{cluster}", get_cluster),
        web.put("/admin/v2/clusters/{cluster}", create_cluster),
        web.post("/admin/v2/clusters/{cluster}", update_cluster),
        web.get("/admin/v2/tenants", list_tenants),
        web.get("/admin/v2/tenants/{tenant}", get_tenant),
        web.put("/admin/v2/tenants/{tenant}", create_tenant),
        web.post("/admin/v2/tenants/{tenant}", update_tenant),
        web.delete("/admin/v2/tenants/{tenant}", delete_tenant),
    ]
