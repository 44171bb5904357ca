"""Who may do what: Pulsar's ``PulsarAuthorizationProvider`` rules, one check per operation.

* A role in ``superUserRoles`` may do everything.
* A tenant's ``adminRoles`` (and superusers) may do everything inside the tenant: namespaces,
  policies, permissions, topic creation and deletion, and also produce and consume
  (``AuthorizationService.isSuperUserOrAdmin``).
* Any other role needs a namespace grant: ``produce`` to produce; ``consume`` to subscribe,
  seek, unsubscribe and manage subscriptions; either to look a topic up, read its stats or
  list the namespace's topics (``canLookup``, ``NamespaceOperation.GET_TOPICS``).
* Tenants and clusters themselves are the superusers' (``validateSuperUserAccess``).

Proxies (``proxyRoles``), as Pulsar's ``ServerCnx`` and ``AuthorizationService``: a proxy
connects with its own credentials and names the client in CONNECT ``original_principal``. Every
check then needs both the proxy role and the original principal to be allowed; a proxy role
without an original principal, an original principal that is itself a proxy role, and any other
role naming an original principal are refused at CONNECT (``original_principal_error``).

A PRODUCER naming ``initial_subscription_name`` creates a durable subscription, so it needs
consume permission too (Pulsar checks ``SUBSCRIBE`` on that subscription alongside ``PRODUCE``).

With ``authorizationEnabled = false`` every check passes. A connection without a role (no
authentication and no ``anonymousUserRole``) is refused everything once authorization is on.
Each check raises ``AuthorizationError`` (``broker/errors.py`` maps it to the wire and HTTP 403)
before anything about the resource is looked up, so a refusal reveals nothing about it.
"""

from __future__ import annotations

from broker.auth.store import AuthPolicyStore
from broker.config import BrokerConfig
from broker.errors import AuthorizationError
from protocol.topic_name import NamespaceName, TopicName

__all__ = ["Authorizer", "split_roles"]

_LOOKUP = ("produce", "consume")


def split_roles(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


class Authorizer:
    def __init__(self, config: BrokerConfig, store: AuthPolicyStore) -> None:
        self.enabled = config.authorization_enabled
        self.superusers = split_roles(config.super_user_roles)
        self.proxy_roles = split_roles(config.proxy_roles)
        self.store = store

    # -- facts --------------------------------------------------------------------------------

    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.superusers

    def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        return self.is_superuser(role) or (
            role is not None and role in self.store.admin_roles(tenant)
        )

    def _granted(self, role: str | None, namespace: str, *actions: str) -> bool:
        return role is not None and any(self.store.allows(namespace, role, a) for a in actions)

    def _topic_allows(self, role: str | None, topic: TopicName, *actions: str) -> bool:
        return self.is_tenant_admin(role, topic.tenant) or self._granted(
            role, topic.namespace_name, *actions
        )

    def _topic_allows_all(
        self, role: str | None, original: str | None, topic: TopicName, *actions: str
    ) -> bool:
        """The role, and the original principal a proxy named, may each do one of ``actions``."""
        if original is not None and not self._topic_allows(original, topic, *actions):
            return False
        return self._topic_allows(role, topic, *actions)

    # -- proxies --------------------------------------------------------------------------------

    def is_proxy_role(self, role: str | None) -> bool:
        return role is not None and role in self.proxy_roles

    def original_principal_error(self, role: str | None, original: str | None) -> str | None:
        """Why a CONNECT's (role, original principal) pair is refused, None if it is valid
        (Pulsar's ``isValidOriginalPrincipal`` for the binary protocol)."""
        if self.is_proxy_role(role):
            if not original:
                return "original_principal must be set when connecting with a proxy role"
            if original in self.proxy_roles:
                return "original_principal cannot be a proxy role"
            return None
        if original:
            return "original_principal can only be set when connecting with a proxy role"
        return None

    # -- checks, one per operation --------------------------------------------------------------

    def check_lookup(
        self, role: str | None, topic: TopicName, *, original: str | None = None
    ) -> None:
        """LOOKUP, PARTITIONED_METADATA, GET_SCHEMA, topic stats: produce or consume."""
        if self.enabled and not self._topic_allows_all(role, original, topic, *_LOOKUP):
            raise AuthorizationError(f"Client is not authorized to look up {topic.full_name}")

    def check_produce(
        self,
        role: str | None,
        topic: TopicName,
        *,
        original: str | None = None,
        initial_subscription: str | None = None,
    ) -> None:
        """PRODUCER (any access mode, fencing included), GET_OR_CREATE_SCHEMA. A PRODUCER's
        ``initial_subscription_name`` creates a durable subscription: consume is needed too."""
        if not self.enabled:
            return
        allowed = self._topic_allows_all(role, original, topic, "produce")
        if allowed and initial_subscription:
            allowed = self._topic_allows_all(role, original, topic, "consume")
        if not allowed:
            raise AuthorizationError(f"Client is not authorized to Produce on {topic.full_name}")

    def check_consume(
        self, role: str | None, topic: TopicName, *, original: str | None = None
    ) -> None:
        """SUBSCRIBE, SEEK, UNSUBSCRIBE and the subscription admin endpoints."""
        if self.enabled and not self._topic_allows_all(role, original, topic, "consume"):
            raise AuthorizationError(f"Client is not authorized to Consume from {topic.full_name}")

    def check_list_topics(
        self, role: str | None, namespace: NamespaceName | str, *, original: str | None = None
    ) -> None:
        """GET_TOPICS_OF_NAMESPACE and the topic lists over HTTP: produce or consume."""
        ns = str(namespace)
        tenant = ns.split("/", 1)[0]
        roles = (role,) if original is None else (role, original)
        if self.enabled and not all(
            self.is_tenant_admin(r, tenant) or self._granted(r, ns, *_LOOKUP) for r in roles
        ):
            raise AuthorizationError(f"Client is not authorized to list the topics of {ns}")

    def check_tenant_admin(self, role: str | None, tenant: str) -> None:
        """Namespace and topic administration, policies, permissions."""
        if self.enabled and not self.is_tenant_admin(role, tenant):
            raise AuthorizationError(f"Client is not authorized to administer tenant {tenant}")

    def check_superuser(self, role: str | None) -> None:
        """Tenants, clusters, brokers."""
        if self.enabled and not self.is_superuser(role):
            raise AuthorizationError("This operation requires super-user access")

    def check_authenticated(self, role: str | None) -> None:
        """Read-only cluster facts any authenticated role may see (Pulsar: no check)."""
        if self.enabled and role is None:
            raise AuthorizationError("This operation requires an authenticated role")
