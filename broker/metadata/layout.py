"""The etcd key layout of the admin metadata in cluster mode: Pulsar's, under the cluster's
prefix ``/magnetar/<clusterName>/``::

    admin/policies/<tenant>                       TenantInfo: {"adminRoles", "allowedClusters"}
    admin/policies/<tenant>/<ns>                  Policies: {"auth_policies": {"namespace_auth"},
                                                  "deduplicationEnabled", retention, TTL, ...}
    admin/partitioned-topics/<t>/<ns>/<domain>/<topic>   {"partitions": N}
    admin/topic-policies/<t>/<ns>/<domain>/<topic>       topic policies and deduplication
    admin/imported                                marker: the metadata lives in etcd now
    schemas/<t>/<ns>/<domain>/<topic>             {"versions": [base64 Schema, ...]}

A key exists exactly as long as its tenant, namespace, partitioned topic or schema does. Topic
local names are percent-encoded (as Pulsar's ``Codec.encode``), so a key has a fixed number of
``/``-separated parts. Pulsar keeps topic policies in a system topic; here they are keys too.
"""

from __future__ import annotations

from urllib.parse import quote, unquote


def cluster_root(cluster_name: str) -> str:
    """The prefix of every etcd key of one cluster: membership and ownership
    (``broker.cluster.membership``) and admin metadata (here)."""
    return f"/magnetar/{cluster_name}/"


class MetadataKeys:
    """The metadata key names of one cluster."""

    def __init__(self, cluster_name: str) -> None:
        root = cluster_root(cluster_name)
        self.admin = f"{root}admin/"
        self.schemas = f"{root}schemas/"
        self.policies = f"{self.admin}policies/"
        self.partitioned = f"{self.admin}partitioned-topics/"
        self.topic_policies = f"{self.admin}topic-policies/"
        self.imported = f"{self.admin}imported"

    def tenant(self, tenant: str) -> str:
        return f"{self.policies}{tenant}"

    def namespace(self, namespace: str) -> str:
        return f"{self.policies}{namespace}"

    def partitioned_topic(self, topic: str) -> str:
        return self.partitioned + topic_path(topic)

    def topic_policy(self, topic: str) -> str:
        return self.topic_policies + topic_path(topic)

    def schema(self, topic: str) -> str:
        return self.schemas + topic_path(topic)


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``t/ns/persistent/x`` (the local name percent-encoded)."""
    domain, _, rest = topic.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    return f"{tenant}/{namespace}/{domain}/{quote(local, safe='')}"


def topic_of_path(path: str) -> str:
    """The inverse of ``topic_path``."""
    tenant, namespace, domain, local = path.split("/", 3)
    return f"{domain}://{tenant}/{namespace}/{unquote(local)}"


def namespace_path_prefix(namespace: str) -> str:
    """The start of the ``topic_path`` of every topic of ``namespace``."""
    return f"{namespace}/"
