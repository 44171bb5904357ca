"""broker.metadata (policies, partitions): tenants, namespace/topic policies and partitioned topics
survive a reopen (the broker restarting), and documents written before they existed still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.metadata.partitions import FilePartitionStore
from broker.metadata.policies import AUTO_TOPIC_CREATION, MESSAGE_TTL, RETENTION, FilePolicyStore


async def test_tenants_and_policies_survive_a_reopen(tmp_path: Path) -> None:
    store = FilePolicyStore(tmp_path)
    assert await store.create_tenant("acme")
    assert not await store.create_tenant("acme")
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    await store.set_namespace_policy("public/default", RETENTION, retention)
    await store.set_namespace_policy("public/default", MESSAGE_TTL, 30)
    await store.set_topic_policy("persistent://public/default/t", MESSAGE_TTL, 5)

    reopened = FilePolicyStore(tmp_path)
    assert reopened.tenants() == ["acme", "public", "pulsar"]
    assert reopened.namespace_policy("public/default", RETENTION) == retention
    assert (
        reopened.effective_policy("persistent://public/default/t", "public/default", MESSAGE_TTL)
        == 5
    )
    assert (
        reopened.effective_policy("persistent://public/default/u", "public/default", MESSAGE_TTL)
        == 30
    )
    assert reopened.namespace_policy("public/default", AUTO_TOPIC_CREATION) is None

    await reopened.set_namespace_policy("public/default", MESSAGE_TTL, None)
    await reopened.forget_topic("persistent://public/default/t")
    await reopened.delete_tenant("acme")
    again = FilePolicyStore(tmp_path)
    assert again.namespace_policy("public/default", MESSAGE_TTL) is None
    assert again.topic_policy("persistent://public/default/t", MESSAGE_TTL) is None
    assert again.tenants() == ["public", "pulsar"]


async def test_unknown_policy_key_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        await FilePolicyStore(tmp_path).set_namespace_policy("public/default", "colour", "blue")


def test_a_document_from_before_tenants_were_stored_loads(tmp_path: Path) -> None:
    old = {"namespaces": ["public/default", "acme/orders"], "namespaceDeduplication": {}}
    (tmp_path / "policies.json").write_text(json.dumps(old))
    store = FilePolicyStore(tmp_path)
    assert store.tenants() == ["acme", "public"]
    assert store.namespace_policy("acme/orders", RETENTION) is None


async def test_partitioned_topics_survive_a_reopen(tmp_path: Path) -> None:
    store = FilePartitionStore(tmp_path)
    await store.set("persistent://public/default/p", 4)
    await store.set("persistent://public/default/p", 6)
    await store.set("persistent://acme/orders/q", 2)
    reopened = FilePartitionStore(tmp_path)
    assert reopened.partitions("persistent://public/default/p") == 6
    assert reopened.partitions("persistent://public/default/other") == 0
    assert reopened.topics_of("public/default") == ["persistent://public/default/p"]
    await reopened.delete("persistent://public/default/p")
    assert FilePartitionStore(tmp_path).topics_of("public/default") == []
    with pytest.raises(ValueError, match="at least one partition"):
        await reopened.set("persistent://public/default/p", 0)
