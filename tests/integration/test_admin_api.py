"""The admin REST API through a real HTTP client (aiohttp) against a running broker.

Every resource of ``broker/admin/``: clusters, tenants, namespaces and their policies, topics,
partitioned topics, subscriptions, stats, internal stats, the HTTP lookup, and the errors
(Pulsar's status codes with a ``{"reason": ...}`` body, never a trace).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pulsar
import pytest
import yarl

from broker.service import BrokerService
from broker.storage.paths import topic_directory
from broker.topics.message_expiry import expire_all
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, new_client, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]

NS = "/admin/v2/namespaces"
TOPICS = "/admin/v2/persistent"


class Admin:
    """Requests against the broker's web port; answers (status, decoded JSON or text)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self, method: str, path: str, body: Any = None, *, raw: str | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        # encoded=True: send the path as written ("%2E%2E" stays, as a client could send it).
        async with self.session.request(
            method,
            yarl.URL(self.base + path, encoded=True),
            data=data,
            headers={"Content-Type": "application/json"},
        ) as reply:
            text = await reply.text()
            if reply.content_type == "application/json":
                return reply.status, json.loads(text)
            return reply.status, text

    async def ok(self, method: str, path: str, body: Any = None, *, raw: str | None = None) -> Any:
        status, answer = await self.call(method, path, body, raw=raw)
        assert status in (200, 204), (method, path, status, answer)
        return answer

    async def until(
        self, method: str, path: str, condition: Callable[[Any], bool], within_s: float = 10
    ) -> Any:
        """Poll ``path`` until ``condition`` holds for its answer (acks travel asynchronously)."""
        deadline = time.monotonic() + within_s
        while True:
            answer = await self.ok(method, path)
            if condition(answer):
                return answer
            assert time.monotonic() < deadline, answer
            await asyncio.sleep(0.02)

    async def refused(
        self, status: int, method: str, path: str, body: Any = None, *, raw: str | None = None
    ) -> str:
        """Assert the request fails with ``status`` and a JSON reason; return the reason."""
        got, answer = await self.call(method, path, body, raw=raw)
        assert got == status, (method, path, got, answer)
        assert isinstance(answer, dict), answer
        assert answer["reason"], answer
        assert "Traceback" not in answer["reason"]
        reason: str = answer["reason"]
        return reason


def running_service(broker: BrokerThread) -> BrokerService:
    assert broker.broker is not None
    assert broker.broker.service is not None
    return broker.broker.service


@pytest.fixture
async def admin(broker: BrokerThread) -> AsyncIterator[Admin]:
    async with aiohttp.ClientSession() as session:
        yield Admin(session, broker.http)


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    client = new_client(broker.url)
    try:
        yield client
    finally:
        client.close()


# ---------------------------------------------------------------------------- clusters, tenants


async def test_clusters_brokers_and_health(admin: Admin, broker: BrokerThread) -> None:
    assert await admin.ok("GET", "/admin/v2/clusters") == ["standalone"]
    cluster = await admin.ok("GET", "/admin/v2/clusters/standalone")
    assert cluster["brokerServiceUrl"] == broker.url
    assert cluster["serviceUrl"] == broker.http
    await admin.refused(404, "GET", "/admin/v2/clusters/elsewhere")
    assert await admin.ok("GET", "/admin/v2/brokers/standalone") == [f"127.0.0.1:{broker.web_port}"]
    assert await admin.ok("GET", "/admin/v2/brokers/health") == "ok"


async def test_tenants_create_get_list_delete(admin: Admin) -> None:
    assert await admin.ok("GET", "/admin/v2/tenants") == ["public", "pulsar"]
    await admin.ok("PUT", "/admin/v2/tenants/acme", {"allowedClusters": ["standalone"]})
    assert await admin.ok("GET", "/admin/v2/tenants") == ["acme", "public", "pulsar"]
    info = await admin.ok("GET", "/admin/v2/tenants/acme")
    assert info == {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert "already exists" in await admin.refused(409, "PUT", "/admin/v2/tenants/acme")
    await admin.refused(412, "PUT", "/admin/v2/tenants/other", {"allowedClusters": ["mars"]})
    await admin.refused(400, "PUT", "/admin/v2/tenants/other", raw="{not json")
    await admin.refused(412, "PUT", "/admin/v2/tenants/%2E%2E")
    await admin.refused(404, "GET", "/admin/v2/tenants/nobody")
    await admin.refused(404, "DELETE", "/admin/v2/tenants/nobody")

    await admin.ok("PUT", f"{NS}/acme/orders")
    assert "active namespaces" in await admin.refused(409, "DELETE", "/admin/v2/tenants/acme")
    await admin.ok("DELETE", f"{NS}/acme/orders")
    await admin.ok("DELETE", "/admin/v2/tenants/acme")
    assert await admin.ok("GET", "/admin/v2/tenants") == ["public", "pulsar"]


# ---------------------------------------------------------------------------- namespaces


async def test_namespaces_create_list_get_delete(admin: Admin, client: pulsar.Client) -> None:
    assert "public/default" in await admin.ok("GET", f"{NS}/public")
    await admin.ok("PUT", f"{NS}/public/orders")
    assert await admin.ok("GET", f"{NS}/public") == [
        "public/default",
        "public/functions",
        "public/orders",
    ]
    assert "already exists" in await admin.refused(409, "PUT", f"{NS}/public/orders")
    assert "Tenant" in await admin.refused(404, "PUT", f"{NS}/nobody/orders")
    await admin.refused(404, "GET", f"{NS}/nobody")
    await admin.refused(404, "GET", f"{NS}/public/missing")
    await admin.refused(412, "PUT", f"{NS}/public/%2E%2E")

    policies = await admin.ok("GET", f"{NS}/public/orders")
    assert policies["retention_policies"] is None
    assert policies["deduplicationEnabled"] is None

    client.create_producer("persistent://public/orders/t").close()
    assert await admin.ok("GET", f"{NS}/public/orders/topics") == ["persistent://public/orders/t"]
    assert "non empty" in await admin.refused(409, "DELETE", f"{NS}/public/orders")
    await admin.ok("DELETE", f"{NS}/public/orders?force=true")
    assert "public/orders" not in await admin.ok("GET", f"{NS}/public")
    await admin.refused(404, "DELETE", f"{NS}/public/orders")


async def test_namespace_retention_policy_is_stored_and_applied(
    admin: Admin, broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/kept"
    client.create_producer(topic).close()
    ledger_config = running_service(broker).topics[topic].ledger.config
    assert ledger_config.retention_time_minutes == broker.config.default_retention_time_in_minutes

    policy = {"retentionTimeInMinutes": 30, "retentionSizeInMB": 100}
    await admin.ok("POST", f"{NS}/public/default/retention", policy)
    assert await admin.ok("GET", f"{NS}/public/default/retention") == policy
    loaded = running_service(broker).topics[topic]
    assert (
        loaded.ledger.config.retention_time_minutes,
        loaded.ledger.config.retention_size_mb,
    ) == (
        30,
        100,
    )

    topic_policy = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    await admin.ok("POST", f"{TOPICS}/public/default/kept/retention", topic_policy)
    assert await admin.ok("GET", f"{TOPICS}/public/default/kept/retention") == topic_policy
    assert loaded.ledger.config.retention_time_minutes == -1  # topic wins over namespace

    await admin.ok("DELETE", f"{TOPICS}/public/default/kept/retention")
    await admin.ok("DELETE", f"{NS}/public/default/retention")
    assert (
        loaded.ledger.config.retention_time_minutes
        == broker.config.default_retention_time_in_minutes
    )
    assert await admin.ok("GET", f"{NS}/public/default/retention") is None

    await admin.refused(400, "POST", f"{NS}/public/default/retention", raw="{bad json")
    await admin.refused(400, "POST", f"{NS}/public/default/retention", {"retentionSizeInMB": 1})
    await admin.refused(
        400,
        "POST",
        f"{NS}/public/default/retention",
        {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1},
    )
    await admin.refused(404, "POST", f"{NS}/public/missing/retention", policy)


async def test_auto_topic_creation_policy_takes_effect(admin: Admin, client: pulsar.Client) -> None:
    path = f"{NS}/public/default/autoTopicCreation"
    await admin.ok("POST", path, {"allowAutoTopicCreation": False, "topicType": "non-partitioned"})
    assert (await admin.ok("GET", path))["allowAutoTopicCreation"] is False
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://public/default/not-created")
    await admin.ok("PUT", f"{TOPICS}/public/default/explicit")  # an admin create still works
    client.create_producer("persistent://public/default/explicit").close()

    await admin.ok("DELETE", path)
    assert await admin.ok("GET", path) is None
    client.create_producer("persistent://public/default/now-created").close()

    await admin.refused(400, "POST", path, {"allowAutoTopicCreation": "yes"})
    await admin.refused(
        412, "POST", path, {"allowAutoTopicCreation": True, "topicType": "partitioned"}
    )


async def test_message_ttl_expires_old_messages_on_subscriptions(
    admin: Admin, broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/ttl"
    client.subscribe(topic, "sub").close()  # no consumer: nothing is prefetched meanwhile
    producer = client.create_producer(topic)
    for index in range(5):
        producer.send(b"old-%d" % index)
    sent_at = time.time()

    await admin.ok("POST", f"{NS}/public/default/messageTTL", 2)
    assert await admin.ok("GET", f"{NS}/public/default/messageTTL") == 2
    await admin.refused(412, "POST", f"{NS}/public/default/messageTTL", -1)
    await admin.refused(400, "POST", f"{NS}/public/default/messageTTL", "soon")

    service = running_service(broker)

    def backlog_after_expiry() -> int:
        broker.call(lambda: expire_all(service.topics, service.topic_policies))
        backlog: int = service.topics[topic].subscriptions["sub"].backlog()
        return backlog

    backlog = backlog_after_expiry()
    if time.time() - sent_at < 2:
        assert backlog == 5  # younger than the TTL: kept
    wait_until(lambda: backlog_after_expiry() == 0, timeout=10)
    producer.send(b"fresh")
    consumer = client.subscribe(topic, "sub")
    assert consumer.receive(5000).data() == b"fresh"  # the expired ones are skipped
    consumer.close()

    await admin.ok("POST", f"{TOPICS}/public/default/ttl/messageTTL?messageTTL=60")
    assert await admin.ok("GET", f"{TOPICS}/public/default/ttl/messageTTL") == 60
    await admin.refused(412, "POST", f"{TOPICS}/public/default/ttl/messageTTL?messageTTL=x")
    await admin.ok("DELETE", f"{TOPICS}/public/default/ttl/messageTTL")
    await admin.ok("DELETE", f"{NS}/public/default/messageTTL")
    assert await admin.ok("GET", f"{NS}/public/default/messageTTL") is None


async def test_deduplication_policies(admin: Admin, broker: BrokerThread) -> None:
    await admin.ok("PUT", f"{TOPICS}/public/default/d")
    await admin.ok("POST", f"{NS}/public/default/deduplication", raw="false")
    assert await admin.ok("GET", f"{NS}/public/default/deduplication") is False
    stats = await admin.ok("GET", f"{TOPICS}/public/default/d/stats")
    assert stats["deduplicationStatus"] == "Disabled"
    await admin.ok("POST", f"{TOPICS}/public/default/d/deduplicationEnabled", raw="true")
    stats = await admin.ok("GET", f"{TOPICS}/public/default/d/stats")
    assert stats["deduplicationStatus"] == "Enabled"
    await admin.refused(400, "POST", f"{NS}/public/default/deduplication", raw="yes")
    await admin.ok("DELETE", f"{TOPICS}/public/default/d/deduplicationEnabled")
    await admin.ok("DELETE", f"{NS}/public/default/deduplication")


# ---------------------------------------------------------------------------- topics


async def test_topics_create_list_unload_delete(admin: Admin, broker: BrokerThread) -> None:
    await admin.ok("PUT", f"{TOPICS}/public/default/a")
    assert "already exists" in await admin.refused(409, "PUT", f"{TOPICS}/public/default/a")
    assert await admin.ok("GET", f"{TOPICS}/public/default") == ["persistent://public/default/a"]
    await admin.ok("PUT", f"{TOPICS}/public/default/a/unload")
    assert "persistent://public/default/a" not in running_service(broker).topics
    assert await admin.ok("GET", f"{TOPICS}/public/default") == ["persistent://public/default/a"]
    await admin.ok("DELETE", f"{TOPICS}/public/default/a")
    assert await admin.ok("GET", f"{TOPICS}/public/default") == []
    assert "not found" in await admin.refused(404, "DELETE", f"{TOPICS}/public/default/a")
    await admin.refused(404, "GET", f"{TOPICS}/public/default/a/stats")
    await admin.refused(404, "GET", f"{TOPICS}/public/default/a/internalStats")
    await admin.refused(404, "PUT", f"{TOPICS}/public/missing/a")
    await admin.refused(404, "GET", f"{TOPICS}/public/missing")
    await admin.refused(412, "PUT", f"{TOPICS}/public/default/%2E%2E")


async def test_stats_count_messages_publishers_subscriptions_and_consumers(
    admin: Admin, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/s"
    consumer = client.subscribe(topic, "sub", consumer_name="c1", receiver_queue_size=100)
    producer = client.create_producer(
        topic,
        producer_name="writer",
        access_mode=pulsar.ProducerAccessMode.Exclusive,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=50,
    )
    for index in range(30):
        producer.send_async(b"m%d" % index, None)
    producer.flush()
    received = [consumer.receive(5000) for _ in range(30)]
    for message in received[:10]:
        consumer.acknowledge(message)

    stats = await admin.until(
        "GET",
        f"{TOPICS}/public/default/s/stats",
        lambda s: s["subscriptions"]["sub"]["unackedMessages"] == 20,
    )
    assert stats["msgInCounter"] == 30  # messages, not batch entries
    assert stats["bytesInCounter"] > 0
    assert stats["storageSize"] > 0
    assert stats["msgOutCounter"] == 30
    [publisher] = stats["publishers"]
    assert publisher["producerName"] == "writer"
    assert publisher["accessMode"] == "Exclusive"
    assert publisher["topicEpoch"] == stats["topicEpoch"] is not None
    sub = stats["subscriptions"]["sub"]
    assert sub["type"] == "Exclusive"
    assert sub["isDurable"] is True
    assert sub["msgBacklog"] > 0
    [consumer_stats] = sub["consumers"]
    assert consumer_stats["consumerName"] == "c1"
    assert consumer_stats["unackedMessages"] == 20
    assert stats["deduplicationStatus"] in ("Enabled", "Disabled")
    assert "accepted" in stats["deduplication"] or stats["deduplication"] == {"enabled": False}


async def test_internal_stats_show_segments_cursors_and_deleted_ranges(
    admin: Admin, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/internal"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % index) for index in range(6)]
    messages = [consumer.receive(5000) for _ in range(6)]
    consumer.acknowledge(messages[2])
    consumer.acknowledge(messages[3])

    path = f"{TOPICS}/public/default/internal/internalStats"
    first = ids[0]

    expected = f"[({first.ledger_id()}:1..{first.ledger_id()}:3]]"
    stats = await admin.until(
        "GET", path, lambda s: s["cursors"]["sub"]["individuallyDeletedMessages"] == expected
    )
    assert stats["numberOfEntries"] == 6
    assert stats["lastConfirmedEntry"] == f"{ids[-1].ledger_id()}:{ids[-1].entry_id()}"
    assert [ledger["entries"] for ledger in stats["ledgers"]] == [6]
    assert stats["cursors"]["sub"]["markDeletePosition"] == f"{first.ledger_id()}:-1"
    assert isinstance(stats["properties"], dict)


# ---------------------------------------------------------------------------- partitioned topics


async def test_partitioned_topic_lifecycle(admin: Admin, client: pulsar.Client) -> None:
    base = f"{TOPICS}/public/default/p"
    await admin.ok("PUT", base + "/partitions", 4)
    assert (await admin.ok("GET", base + "/partitions"))["partitions"] == 4
    assert await admin.ok("GET", f"{TOPICS}/public/default/partitioned") == [
        "persistent://public/default/p"
    ]
    assert await admin.ok("GET", f"{TOPICS}/public/default") == [
        f"persistent://public/default/p-partition-{i}" for i in range(4)
    ]
    assert "already exists" in await admin.refused(409, "PUT", base + "/partitions", 2)
    await admin.refused(409, "PUT", base)  # a non-partitioned topic of the same name
    await admin.refused(409, "PUT", f"{TOPICS}/public/default/p-partition-1")

    client.subscribe("persistent://public/default/p", "kept").close()
    await admin.ok("POST", base + "/partitions", 6)
    assert (await admin.ok("GET", base + "/partitions"))["partitions"] == 6
    subscriptions = await admin.ok("GET", f"{TOPICS}/public/default/p-partition-5/subscriptions")
    assert subscriptions == ["kept"]  # copied to the new partitions, as Pulsar does
    reason = await admin.refused(422, "POST", base + "/partitions", 3)
    assert "can't less than current partitions 6" in reason
    await admin.ok("POST", base + "/partitions", 6)  # the same count: nothing to do

    stats = await admin.ok("GET", base + "/partitioned-stats")
    assert stats["metadata"] == {"partitions": 6}
    assert len(stats["partitions"]) == 6
    assert set(stats["subscriptions"]) == {"kept"}
    await admin.refused(404, "GET", base + "/stats")  # a partitioned topic has no own stats
    internal = await admin.ok("GET", base + "/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": 6}
    assert sorted(internal["partitions"]) == [
        f"persistent://public/default/p-partition-{i}" for i in range(6)
    ]

    await admin.ok("DELETE", base + "/partitions")
    assert (await admin.ok("GET", base + "/partitions"))["partitions"] == 0
    assert await admin.ok("GET", f"{TOPICS}/public/default") == []
    assert await admin.ok("GET", f"{TOPICS}/public/default/partitioned") == []
    await admin.refused(404, "DELETE", base + "/partitions")
    await admin.refused(404, "GET", base + "/partitioned-stats")


async def test_a_growth_and_a_delete_do_not_interleave(admin: Admin) -> None:
    """Run together, a growth and a delete end as if one ran after the other: the topic is gone
    (interleaved, the growth would store its count after the delete: a topic back from the
    dead, with partitions 0-1 missing)."""
    base = f"{TOPICS}/public/default/raced/partitions"
    await admin.ok("PUT", base, 2)
    grown, deleted = await asyncio.gather(admin.call("POST", base, 40), admin.call("DELETE", base))
    assert deleted[0] == 204
    assert grown[0] in (204, 404)
    assert (await admin.ok("GET", base))["partitions"] == 0
    assert await admin.ok("GET", f"{TOPICS}/public/default") == []


async def test_partitioned_topic_bad_requests(admin: Admin) -> None:
    base = f"{TOPICS}/public/default/q"
    await admin.refused(406, "PUT", base + "/partitions", 0)
    await admin.refused(406, "PUT", base + "/partitions", 1_000_000_000)
    await admin.refused(400, "PUT", base + "/partitions", raw="four")
    await admin.refused(400, "PUT", base + "/partitions", raw="{")
    await admin.refused(412, "PUT", f"{TOPICS}/public/default/q-partition-0/partitions", 2)
    await admin.refused(404, "PUT", f"{TOPICS}/public/missing/q/partitions", 2)
    await admin.refused(404, "GET", f"{TOPICS}/public/missing/q/partitions")
    assert (await admin.ok("GET", base + "/partitions"))["partitions"] == 0  # unknown: 0
    await admin.refused(404, "POST", base + "/partitions", 3)  # no such topic
    await admin.ok("PUT", base)
    assert "not the partitioned topic" in await admin.refused(409, "POST", base + "/partitions", 3)
    assert "already exists" in await admin.refused(409, "PUT", base + "/partitions", 3)
    await admin.ok("PUT", f"{TOPICS}/public/default/r-partition-1")  # made by hand
    stray = await admin.refused(409, "PUT", f"{TOPICS}/public/default/r/partitions", 2)
    assert "r-partition-1" in stray


# ---------------------------------------------------------------------------- subscriptions


async def test_subscriptions_create_reset_skip_delete(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/subs"
    base = f"{TOPICS}/public/default/subs"
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % index) for index in range(5)]
    middle = ids[2]

    await admin.ok("PUT", base + "/subscription/from-start", {"ledgerId": -1, "entryId": -1})
    await admin.ok("PUT", base + "/subscription/from-end")
    at = {"ledgerId": middle.ledger_id(), "entryId": middle.entry_id()}
    await admin.ok("PUT", base + "/subscription/from-middle", at)
    assert await admin.ok("GET", base + "/subscriptions") == [
        "from-end",
        "from-middle",
        "from-start",
    ]
    assert "already exists" in await admin.refused(409, "PUT", base + "/subscription/from-end")
    await admin.refused(400, "PUT", base + "/subscription/x", raw="{bad")
    await admin.refused(400, "PUT", base + "/subscription/x", {"ledgerId": "a"})
    await admin.refused(412, "PUT", base + "/subscription/pulsar.dedup")

    async def backlogs() -> dict[str, int]:
        stats = await admin.ok("GET", base + "/stats")
        return {name: sub["msgBacklog"] for name, sub in stats["subscriptions"].items()}

    assert await backlogs() == {"from-start": 5, "from-end": 0, "from-middle": 3}

    await admin.ok("POST", base + "/subscription/from-end/resetcursor/0")  # by time: all
    await admin.ok("POST", base + "/subscription/from-start/skip_all")
    at_last = {"ledgerId": ids[4].ledger_id(), "entryId": ids[4].entry_id()}
    await admin.ok("POST", base + "/subscription/from-middle/resetcursor", at_last)
    assert await backlogs() == {"from-start": 0, "from-end": 5, "from-middle": 1}
    future_ms = int(time.time() * 1000) + 60_000
    await admin.ok("POST", base + f"/subscription/from-end/resetcursor/{future_ms}")
    assert (await backlogs())["from-end"] == 0

    await admin.refused(404, "POST", base + "/subscription/nobody/skip_all")
    await admin.refused(404, "POST", base + "/subscription/nobody/resetcursor/0")
    await admin.refused(400, "POST", base + "/subscription/from-end/resetcursor/yesterday")
    await admin.refused(400, "POST", base + "/subscription/from-end/resetcursor", raw="[]")

    consumer = client.subscribe(topic, "from-start")
    assert "active" in await admin.refused(412, "DELETE", base + "/subscription/from-start")
    await admin.ok("DELETE", base + "/subscription/from-start?force=true")
    await admin.ok("DELETE", base + "/subscription/from-end")
    assert await admin.ok("GET", base + "/subscriptions") == ["from-middle"]
    await admin.refused(404, "DELETE", base + "/subscription/from-end")
    await admin.refused(404, "GET", f"{TOPICS}/public/default/nothing/subscriptions")
    consumer.close()


async def test_expire_messages_on_demand(admin: Admin, client: pulsar.Client) -> None:
    base = f"{TOPICS}/public/default/expire"
    producer = client.create_producer("persistent://public/default/expire")
    await admin.ok("PUT", base + "/subscription/a", {"ledgerId": -1, "entryId": -1})
    await admin.ok("PUT", base + "/subscription/b", {"ledgerId": -1, "entryId": -1})
    producer.send(b"x")
    await admin.ok("POST", base + "/subscription/a/expireMessages/3600")  # nothing that old
    await admin.ok("POST", base + "/subscription/a/expireMessages/0")
    stats = await admin.ok("GET", base + "/stats")
    assert (
        stats["subscriptions"]["a"]["msgBacklog"],
        stats["subscriptions"]["b"]["msgBacklog"],
    ) == (
        0,
        1,
    )
    await admin.ok("POST", base + "/all_subscription/expireMessages/0")
    stats = await admin.ok("GET", base + "/stats")
    assert stats["subscriptions"]["b"]["msgBacklog"] == 0
    await admin.refused(400, "POST", base + "/subscription/a/expireMessages/soon")


# ---------------------------------------------------------------------------- lookup, errors


async def test_lookup(admin: Admin, broker: BrokerThread) -> None:
    answer = await admin.ok("GET", "/lookup/v2/topic/persistent/public/default/any")
    assert answer["brokerUrl"] == broker.url
    assert answer["httpUrl"] == broker.http
    await admin.refused(404, "GET", "/lookup/v2/topic/persistent/public/missing/any")
    await admin.refused(412, "GET", "/lookup/v2/topic/non-persistent/public/default/any")
    await admin.refused(412, "GET", "/lookup/v2/topic/persistent/public/default/%2E%2E")


async def test_unknown_paths_methods_and_garbage_answer_json(admin: Admin) -> None:
    await admin.refused(404, "GET", "/admin/v2/nothing-here")
    await admin.refused(405, "PATCH", f"{NS}/public/default")
    deep = "[" * 100_000 + "]" * 100_000
    await admin.refused(400, "POST", f"{NS}/public/default/retention", raw=deep)
    await admin.refused(400, "PUT", f"{TOPICS}/public/default/g/partitions", raw="\x00\xff")
    await admin.refused(400, "PUT", f"{TOPICS}/public/default/g/partitions", raw="4.5")
    await admin.refused(400, "PUT", f"{TOPICS}/public/default/g/partitions", raw="true")
    await admin.refused(412, "GET", f"{TOPICS}/public/default/%FF/stats")
    # Unicode digits ("²") are not numbers to the API.
    sub = f"{TOPICS}/public/default/g/subscription/s"
    await admin.refused(400, "POST", sub + "/expireMessages/%C2%B2")
    await admin.refused(400, "POST", sub + "/resetcursor/%C2%B2")
    await admin.refused(412, "POST", f"{TOPICS}/public/default/g/messageTTL?messageTTL=%C2%B2")


async def test_terminate_refuses_producers_keeps_messages_and_survives_a_restart(
    admin: Admin, broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/ending"
    base = f"{TOPICS}/public/default/ending"
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % index) for index in range(3)]
    last = await admin.ok("POST", base + "/terminate")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert await admin.ok("POST", base + "/terminate") == last  # idempotent
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"after")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    assert (await admin.ok("GET", base + "/internalStats"))["state"] == "Terminated"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    consumer.close()

    await admin.ok("PUT", base + "/unload")  # reloaded from disk: still terminated
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    await admin.refused(404, "POST", f"{TOPICS}/public/default/never/terminate")
    await admin.ok("PUT", f"{TOPICS}/public/default/parts/partitions", 2)
    await admin.refused(405, "POST", f"{TOPICS}/public/default/parts/terminate")


def test_partitioned_metadata_survives_a_restart(broker: BrokerThread) -> None:
    async def create() -> None:
        async with aiohttp.ClientSession() as session:
            await Admin(session, broker.http).ok(
                "PUT", f"{TOPICS}/public/default/kept/partitions", 3
            )

    asyncio.run(create())
    broker.stop()
    restarted = BrokerThread(broker.config).start()
    try:
        assert running_service(restarted).partitions_of(TopicName.parse("kept")) == 3
        client = new_client(restarted.url)
        try:
            assert client.get_topic_partitions("persistent://public/default/kept") == [
                f"persistent://public/default/kept-partition-{i}" for i in range(3)
            ]
        finally:
            client.close()
    finally:
        restarted.stop()


async def test_no_route_answers_500_to_bad_input(admin: Admin) -> None:
    """Every route, every method it has, with odd bodies and path values: never a 500."""
    from broker.admin import routes

    values = {
        "tenant": "public",
        "ns": "default",
        "topic": "fuzz",
        "subscription": "s",
        "timestamp": "soon",
        "seconds": "-1",
        "cluster": "standalone",
        "domain": "persistent",
    }
    bodies = [None, "garbage", "{}", "[]", "-1", "null", '{"ledgerId": null}']
    for route in routes():
        path = route.path
        for key, value in values.items():
            path = path.replace("{" + key + "}", value)
        for body in bodies:
            status, answer = await admin.call(route.method, path, raw=body)
            assert status < 500, (route.method, path, body, status, answer)


async def test_a_500_names_an_error_id_and_the_log_has_the_failure(
    admin: Admin, broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected exception (here: the topic's cursor folder is a file, so loading it fails
    with an OSError naming the path) answers a generic reason with an error id; the log keeps
    the exception under that id. 4xx keep their reasons."""
    await admin.ok("PUT", f"{TOPICS}/public/default/broken")
    await admin.ok("PUT", f"{TOPICS}/public/default/broken/unload")
    topic = TopicName.parse("persistent://public/default/broken")
    cursors = topic_directory(broker.config.data_path, topic) / "cursors"
    shutil.rmtree(cursors)
    cursors.write_bytes(b"not a folder")
    with caplog.at_level(logging.ERROR, logger="broker.admin"):
        status, answer = await admin.call("GET", f"{TOPICS}/public/default/broken/stats")
    assert status == 500, answer
    error_id = answer["errorId"]
    assert answer == {
        "reason": f"Internal server error (error id {error_id}); the broker log has the details",
        "errorId": error_id,
    }
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
    assert str(cursors) in str(logged[0].exc_info[1])  # what the reply leaves out
    _, again = await admin.call("GET", f"{TOPICS}/public/default/broken/stats")
    assert again["errorId"] != error_id
    reason = await admin.refused(404, "GET", f"{TOPICS}/public/default/absent/stats")
    assert "persistent://public/default/absent" in reason
