"""Cluster mode's admin metadata in etcd: the stores, and the import of a previous build's files.

``open_cluster_metadata`` connects to etcd, imports ``<dataDir>/metadata`` once (see below),
starts the mirrors (``broker/metadata/mirror.py``: one on ``admin/``, one on ``schemas/``) and
returns the etcd-backed stores the ``BrokerService`` uses instead of the file-backed ones.

**Import.** Brokers of earlier builds kept tenants, namespaces, policies, permissions, partition
counts and schemas in ``dataDir/metadata`` JSON files even in cluster mode. When etcd has no
metadata yet for the cluster (no ``admin/imported`` marker), the first broker to start writes
what those files hold (or, without files, what a new standalone broker starts with:
``public/default`` and its siblings) into the keys, then the marker. Each key is written by a
transaction "if neither this key nor the marker exists", so brokers starting together write the
same values at most once, and once the marker exists nothing is ever imported again: a later
delete is never undone by a late importer.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.auth.store import EtcdAuthPolicies, FileAuthPolicies
from broker.blocking import run_blocking
from broker.cluster.store import EtcdStore
from broker.config import BrokerConfig
from broker.metadata.etcd_partitions import EtcdPartitionStore
from broker.metadata.etcd_policies import DEDUP, EtcdPolicyStore
from broker.metadata.etcd_schemas import EtcdSchemaStore
from broker.metadata.layout import MetadataKeys
from broker.metadata.mirror import MetadataMirror, encode
from broker.metadata.partitions import FilePartitionStore
from broker.metadata.policies import FilePolicyStore
from broker.metadata.schemas import FileSchemaStore

log = logging.getLogger(__name__)


@dataclass
class ClusterMetadata:
    """The etcd-backed stores of one broker, and what to close at shutdown."""

    store: EtcdStore
    mirrors: tuple[MetadataMirror, ...]
    policies: EtcdPolicyStore
    partitions: EtcdPartitionStore
    schemas: EtcdSchemaStore
    auth: EtcdAuthPolicies

    async def close(self) -> None:
        for mirror in self.mirrors:
            await mirror.close()
        with contextlib.suppress(Exception):
            await self.store.close()


async def open_cluster_metadata(config: BrokerConfig, store: EtcdStore) -> ClusterMetadata:
    """Connect ``store``, import the files if etcd has no metadata yet, start the mirrors."""
    await store.connect()
    keys = MetadataKeys(config.cluster_name)
    await import_files(store, keys, config.data_path / "metadata")
    admin = MetadataMirror(store, keys.admin)
    schemas = MetadataMirror(store, keys.schemas)
    await admin.start()
    await schemas.start()
    return ClusterMetadata(
        store,
        (admin, schemas),
        EtcdPolicyStore(admin, keys),
        EtcdPartitionStore(admin, keys),
        EtcdSchemaStore(schemas, keys),
        EtcdAuthPolicies(admin, keys),
    )


async def import_files(store: EtcdStore, keys: MetadataKeys, directory: Path) -> int:
    """Write the files' metadata into etcd unless etcd already has it (see the module
    docstring); the number of keys this broker wrote."""
    if await store.read(keys.imported) is not None:
        return 0
    values = await run_blocking(lambda: dict(exported_keys(keys, directory)))
    written = 0
    for key, value in values.items():
        written += await store.put_absent_unless(key, encode(value), keys.imported)
    marker = {"importedFrom": str(directory), "keys": len(values), "at": time.time()}
    await store.swap(keys.imported, encode(marker), 0)  # the first broker's marker stays
    if written:
        log.info("cluster metadata: imported %d keys from %s into etcd", written, directory)
    return written


def exported_keys(keys: MetadataKeys, directory: Path) -> Iterator[tuple[str, Any]]:
    """The etcd keys and values of the metadata files in ``directory`` (a disk thread)."""
    policies = FilePolicyStore(directory)
    auth = FileAuthPolicies(directory)
    for tenant in policies.tenants():
        info = auth.tenants.get(tenant, {})
        yield (
            keys.tenant(tenant),
            {
                "adminRoles": list(info.get("adminRoles", [])),
                "allowedClusters": list(info.get("allowedClusters", [])),
            },
        )
    for namespace in sorted(policies.namespaces):
        value: dict[str, Any] = dict(policies.namespace_policies.get(namespace, {}))
        if namespace in policies.namespace_dedup:
            value[DEDUP] = policies.namespace_dedup[namespace]
        grants = auth.namespaces.get(namespace)
        if grants:
            value["auth_policies"] = {"namespace_auth": grants}
        yield keys.namespace(namespace), value
    for topic in sorted(set(policies.topic_policies) | set(policies.topic_dedup)):
        value = dict(policies.topic_policies.get(topic, {}))
        if topic in policies.topic_dedup:
            value[DEDUP] = policies.topic_dedup[topic]
        yield keys.topic_policy(topic), value
    partitions = FilePartitionStore(directory)
    for namespace in sorted(policies.namespaces):
        for topic in partitions.topics_of(namespace):
            yield keys.partitioned_topic(topic), {"partitions": partitions.partitions(topic)}
    schemas = FileSchemaStore(directory)
    for topic, versions in schemas.all_versions():
        yield keys.schema(topic), {"versions": versions}
