"""``/admin/v2/namespaces/{tenant}[/{ns}[/...]]``: namespaces and their policies, as Pulsar.

Policies (deduplication, retention, message TTL, auto topic creation, the schema policies) are
stored durably and applied to the loaded topics at once (the schema policies are read by each
PRODUCER and SUBSCRIBE that brings a schema, so the next one sees a change); ``GET .../{ns}``
answers them in Pulsar's ``Policies`` JSON. Deleting a namespace that still has topics is
refused (409) unless ``force=true``, which deletes its topics first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import (
    AdminError,
    existing_namespace,
    existing_tenant,
    json_response,
    namespace_name,
    no_content,
    query_bool,
    read_bool,
    read_int,
    read_json,
    service_of,
)
from broker.admin.permissions import parse_actions
from broker.admin.topics import (
    apply_compaction_thresholds,
    apply_dedup_policies,
    apply_retention_policies,
    namespace_topics,
    retention_body,
)
from broker.metadata.policies import (
    ALLOW_AUTO_UPDATE_SCHEMA,
    AUTO_TOPIC_CREATION,
    COMPACTION_THRESHOLD,
    MESSAGE_TTL,
    RETENTION,
    SCHEMA_AUTO_UPDATE_STRATEGY,
    SCHEMA_COMPATIBILITY_STRATEGY,
    SCHEMA_VALIDATION_ENFORCED,
)
from broker.schemas.strategy import (
    AUTO_UPDATE_STRATEGIES,
    Strategy,
    from_auto_update,
    parse_strategy,
)
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from broker.service import BrokerService

NAMESPACE = "/admin/v2/namespaces/{tenant}/{ns}"


async def list_namespaces(request: web.Request) -> web.Response:
    tenant = existing_tenant(request)
    namespaces = service_of(request).policies.namespaces
    return json_response(sorted(n for n in namespaces if n.startswith(tenant + "/")))


async def create_namespace(request: web.Request) -> web.Response:
    namespace = str(namespace_name(request))
    existing_tenant(request)
    grants = await namespace_auth_of_body(request)  # Pulsar's Policies body, if any
    if not await service_of(request).policies.create_namespace(namespace):
        raise AdminError(409, "Namespace already exists")
    if grants:
        await service_of(request).security.store.set_permissions(namespace, grants)
    return no_content()


async def namespace_auth_of_body(request: web.Request) -> dict[str, list[str]]:
    """``auth_policies.namespace_auth`` (role -> actions) of a ``Policies`` body, if sent."""
    if not (await request.text()).strip():
        return {}
    policies = await read_json(request)
    if not isinstance(policies, dict):
        raise AdminError(400, "Body must be a Policies JSON object")
    auth = policies.get("auth_policies") or {}
    grants = auth.get("namespace_auth") or {} if isinstance(auth, dict) else None
    if not isinstance(grants, dict):
        raise AdminError(400, "auth_policies.namespace_auth must map roles to actions")
    return {str(role): parse_actions(actions) for role, actions in grants.items()}


async def get_policies(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    policies = service_of(request).policies
    return json_response(
        {
            "deduplicationEnabled": policies.namespace_dedup.get(namespace),
            RETENTION: policies.namespace_policy(namespace, RETENTION),
            MESSAGE_TTL: policies.namespace_policy(namespace, MESSAGE_TTL),
            AUTO_TOPIC_CREATION: policies.namespace_policy(namespace, AUTO_TOPIC_CREATION),
            **{p.key: await p.shown(request, namespace) for p in SCHEMA_POLICIES},
            "replication_clusters": [service_of(request).config.cluster_name],
            "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
            "deleted": False,
            "auth_policies": {
                "namespace_auth": service_of(request).security.store.permissions(namespace),
                "destination_auth": {},
                "subscription_auth_roles": {},
            },
        }
    )


async def delete_namespace(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    service = service_of(request)
    topics = namespace_topics(service, namespace)
    partitioned = service.partitioned.topics_of(namespace)
    if (topics or partitioned) and not query_bool(request, "force"):
        raise AdminError(409, "Cannot delete non empty namespace")
    for topic in topics:
        name = TopicName.parse(topic)
        await service.delete_topic(name)
        await service.policies.forget_topic(name.full_name)
    for topic in partitioned:
        await service.policies.forget_topic(topic)
        await service.partitioned.delete(topic)
    await service.policies.delete_namespace(namespace)
    await service.security.store.forget_namespace(namespace)  # no grants for a later namesake
    return no_content()


async def list_namespace_topics(request: web.Request) -> web.Response:
    """``GET .../{ns}/topics`` (what a client's regex subscription asks over HTTP)."""
    namespace = existing_namespace(request)
    return json_response(namespace_topics(service_of(request), namespace))


# ---------------------------------------------------------------------------- policies


async def get_dedup(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    return json_response(service_of(request).policies.namespace_dedup.get(namespace))


async def set_dedup(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    enabled = await read_bool(request)
    service = service_of(request)
    await service.policies.set_namespace_dedup(namespace, enabled)
    await apply_dedup_policies(service, namespace)
    return no_content()


async def remove_dedup(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    service = service_of(request)
    await service.policies.set_namespace_dedup(namespace, None)
    await apply_dedup_policies(service, namespace)
    return no_content()


async def retention_value(request: web.Request) -> Any:
    return retention_body(await read_json(request))


async def compaction_threshold_value(request: web.Request) -> Any:
    """Bytes; 0 disables."""
    threshold = await read_int(request, "compactionThreshold")
    if threshold < 0:
        raise AdminError(412, "compactionThreshold must be 0 or more")
    return threshold


async def ttl_value(request: web.Request) -> Any:
    seconds = await read_int(request, "messageTTL")
    if seconds < 0:
        raise AdminError(412, "Invalid value for message TTL")
    return seconds


async def auto_creation_value(request: web.Request) -> Any:
    """Pulsar's ``AutoTopicCreationOverride``; only non-partitioned auto-creation exists here."""
    document = await read_json(request)
    if not isinstance(document, dict) or not isinstance(
        document.get("allowAutoTopicCreation"), bool
    ):
        raise AdminError(400, 'Body must be {"allowAutoTopicCreation": true|false, ...}')
    topic_type = document.get("topicType", "non-partitioned")
    if document["allowAutoTopicCreation"] and topic_type != "non-partitioned":
        raise AdminError(
            412, f"topicType {topic_type!r} is not supported: only non-partitioned auto-creation"
        )
    return {"allowAutoTopicCreation": document["allowAutoTopicCreation"], "topicType": topic_type}


async def strategy_value(request: web.Request) -> Any:
    """A ``SchemaCompatibilityStrategy`` name as a JSON string; UNDEFINED unsets it."""
    try:
        strategy = parse_strategy(await read_json(request))
    except ValueError as exc:
        raise AdminError(400, str(exc)) from None
    return None if strategy is Strategy.UNDEFINED else str(strategy)


async def auto_update_strategy_value(request: web.Request) -> Any:
    """The deprecated ``SchemaAutoUpdateCompatibilityStrategy`` name as a JSON string."""
    name = await read_json(request)
    if name not in AUTO_UPDATE_STRATEGIES:
        raise AdminError(400, f"Unknown schema auto update strategy {name!r}")
    return name


async def bool_value(request: web.Request) -> Any:
    return await read_bool(request)


def _broker_allows_auto_update(service: BrokerService, namespace: str) -> Any:
    return service.config.is_allow_auto_update_schema_enabled


def _broker_enforces_validation(service: BrokerService, namespace: str) -> Any:
    return service.config.is_schema_validation_enforced


def _strategy_of_auto_update(service: BrokerService, namespace: str) -> Any:
    """Pulsar's answer while no strategy is set: the older auto-update policy's, if any;
    UNDEFINED (the broker's ``schemaCompatibilityStrategy`` applies) otherwise."""
    auto = from_auto_update(
        service.policies.namespace_policy(namespace, SCHEMA_AUTO_UPDATE_STRATEGY)
    )
    return str(auto or Strategy.UNDEFINED)


@dataclass(frozen=True)
class NamespacePolicy:
    """One stored namespace policy and its REST trio: ``GET``, set (``method``), ``DELETE``.

    ``read`` turns a request body into the stored value (raising ``AdminError`` on bad input);
    ``apply`` pushes a change to the loaded topics at once (None: topics read it when needed);
    ``unset`` is what ``GET`` answers while the namespace has no value (None: ``null``), as
    Pulsar answers the broker's value for ``isAllowAutoUpdateSchema``.
    """

    path: str
    key: str
    method: str
    read: Callable[[web.Request], Awaitable[Any]]
    apply: Callable[[BrokerService], None] | None = None
    unset: Callable[[BrokerService, str], Any] | None = None

    async def get(self, request: web.Request) -> web.Response:
        return json_response(await self.shown(request, existing_namespace(request)))

    async def shown(self, request: web.Request, namespace: str) -> Any:
        service = service_of(request)
        value = service.policies.namespace_policy(namespace, self.key)
        if value is None and self.unset is not None:
            return self.unset(service, namespace)
        return value

    async def set(self, request: web.Request) -> web.Response:
        namespace = existing_namespace(request)
        value = await self.read(request)
        return await self._store(request, namespace, value)

    async def remove(self, request: web.Request) -> web.Response:
        return await self._store(request, existing_namespace(request), None)

    async def _store(self, request: web.Request, namespace: str, value: Any) -> web.Response:
        service = service_of(request)
        await service.policies.set_namespace_policy(namespace, self.key, value)
        if self.apply is not None:
            self.apply(service)
        return no_content()

    def routes(self) -> list[web.RouteDef]:
        path = f"{NAMESPACE}/{self.path}"
        return [
            web.get(path, self.get),
            web.route(self.method, path, self.set),
            web.delete(path, self.remove),
        ]


POLICIES = (
    NamespacePolicy("retention", RETENTION, "POST", retention_value, apply_retention_policies),
    NamespacePolicy(
        "compactionThreshold",
        COMPACTION_THRESHOLD,
        "PUT",
        compaction_threshold_value,
        apply_compaction_thresholds,
    ),
    NamespacePolicy("messageTTL", MESSAGE_TTL, "POST", ttl_value),
    NamespacePolicy("autoTopicCreation", AUTO_TOPIC_CREATION, "POST", auto_creation_value),
)
SCHEMA_POLICIES = (
    NamespacePolicy(
        "schemaCompatibilityStrategy",
        SCHEMA_COMPATIBILITY_STRATEGY,
        "PUT",
        strategy_value,
        unset=_strategy_of_auto_update,
    ),
    NamespacePolicy(
        "schemaAutoUpdateCompatibilityStrategy",
        SCHEMA_AUTO_UPDATE_STRATEGY,
        "PUT",
        auto_update_strategy_value,
    ),
    NamespacePolicy(
        "isAllowAutoUpdateSchema",
        ALLOW_AUTO_UPDATE_SCHEMA,
        "POST",
        bool_value,
        unset=_broker_allows_auto_update,
    ),
    NamespacePolicy(
        "schemaValidationEnforced",
        SCHEMA_VALIDATION_ENFORCED,
        "POST",
        bool_value,
        unset=_broker_enforces_validation,
    ),
)


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/v2/namespaces/{tenant}", list_namespaces),
        web.put(NAMESPACE, create_namespace),
        web.get(NAMESPACE, get_policies),
        web.delete(NAMESPACE, delete_namespace),
        web.get(NAMESPACE + "/topics", list_namespace_topics),
        web.get(NAMESPACE + "/deduplication", get_dedup),
        web.post(NAMESPACE + "/deduplication", set_dedup),
        web.delete(NAMESPACE + "/deduplication", remove_dedup),
        *(route for policy in (*POLICIES, *SCHEMA_POLICIES) for route in policy.routes()),
    ]
