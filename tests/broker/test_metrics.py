"""``GET /metrics``: scraped over real HTTP from a running broker, parsed with prometheus-client's
own parser, while the official client produces and consumes."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import commands, pb
from protocol.metadata import encode_entry
from tests.helpers import (
    BrokerThread,
    broker_config,
    close_client,
    new_client,
    topic_stats,
    wait_until,
)
from tests.raw_client import RawConnection, send_outcomes

pytestmark = [pytest.mark.integration, pytest.mark.compat]

NAMESPACE = "public/default"
# Every family /metrics must always carry (even before any topic is loaded).
FAMILIES = {
    "pulsar_topics_count": "gauge",
    "pulsar_ml_cache_used_size": "gauge",
    "pulsar_rate_in": "gauge",
    "pulsar_rate_out": "gauge",
    "pulsar_throughput_in": "gauge",
    "pulsar_throughput_out": "gauge",
    "pulsar_msg_backlog": "gauge",
    "pulsar_storage_size": "gauge",
    "pulsar_producers_count": "gauge",
    "pulsar_subscriptions_count": "gauge",
    "pulsar_consumers_count": "gauge",
    "pulsar_in_messages": "counter",
    "pulsar_in_bytes": "counter",
    "pulsar_out_messages": "counter",
    "pulsar_out_bytes": "counter",
    "magnetar_dedup_duplicates": "counter",
    "magnetar_dedup_unknown": "counter",
    "magnetar_fenced_producers": "counter",
    "magnetar_idempotency_keys": "gauge",
    "magnetar_idempotency_duplicates": "counter",
    "magnetar_idempotency_in_flight": "counter",
    "magnetar_idempotency_hidden_messages": "counter",
    "pulsar_storage_write_latency": "histogram",
    "magnetar_storage_fsync_latency": "histogram",
    "magnetar_group_commit_entries": "histogram",
}
# The families without a topic label: a namespace's count, and the broker's shared cache.
BROKER_LEVEL = {"pulsar_topics_count", "pulsar_ml_cache_used_size"}


@dataclass(frozen=True)
class Scrape:
    """One parsed scrape: sample values by (sample name, sorted labels)."""

    types: dict[str, str]
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [dict(labels) for sample, labels in self.samples if sample == name]


def scrape(http: str) -> Scrape:
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    types: dict[str, str] = {}
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return Scrape(types, samples)


def new_topic() -> str:
    return f"persistent://{NAMESPACE}/metrics-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = new_client(broker.url)
    try:
        yield c
    finally:
        close_client(c)


def produce_batched(client: pulsar.Client, topic: str, count: int, **options: object) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=100,
        batching_max_publish_delay_ms=50,
        **options,
    )
    for i in range(count):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    producer.close()


def test_every_family_is_there_before_any_topic(broker: BrokerThread) -> None:
    result = scrape(broker.http)
    for name, kind in FAMILIES.items():
        assert result.types.get(name) == kind, name
    # Nothing loaded yet: no series, only the names (dashboards and alerts can find them).
    assert result.label_sets("pulsar_in_messages_total") == []


def test_values_move_as_messages_flow(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = new_topic()
    labels = {"cluster": "standalone", "namespace": NAMESPACE, "topic": topic}
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce_batched(client, topic, 1000)

    after_produce = scrape(broker.http)
    # Counted in messages as Pulsar does, not in (batch) entries.
    assert after_produce.value("pulsar_in_messages_total", **labels) == 1000
    assert topic_stats(broker.http, topic)["msgInCounter"] == 1000
    assert after_produce.value("pulsar_in_bytes_total", **labels) > 1000 * len(b"m-0")
    assert after_produce.value("pulsar_rate_in", **labels) > 0
    assert after_produce.value("pulsar_throughput_in", **labels) > 0
    assert after_produce.value("pulsar_storage_size", **labels) > 0
    assert after_produce.value("pulsar_subscriptions_count", **labels) == 1
    assert after_produce.value("pulsar_consumers_count", **labels) == 1
    assert after_produce.value("pulsar_producers_count", **labels) == 0  # closed again
    assert after_produce.value("pulsar_topics_count", cluster="standalone", namespace=NAMESPACE)
    assert after_produce.value("pulsar_ml_cache_used_size", cluster="standalone") > 1000
    # One latency observation per entry: batching made far fewer entries than messages.
    entries = after_produce.value("pulsar_storage_write_latency_count", **labels)
    assert 1 <= entries < 1000
    inf_bucket = {**labels, "le": "+Inf"}
    assert after_produce.value("pulsar_storage_write_latency_bucket", **inf_bucket) == entries
    assert after_produce.value("magnetar_group_commit_entries_sum", **labels) == entries
    flushes = after_produce.value("magnetar_storage_fsync_latency_count", **labels)
    assert 1 <= flushes <= entries
    assert after_produce.value("magnetar_group_commit_entries_count", **labels) == flushes

    received = [consumer.receive(5000) for _ in range(1000)]
    for message in received:
        consumer.acknowledge(message)

    def everything_acknowledged() -> bool:
        return scrape(broker.http).value("pulsar_msg_backlog", **labels) == 0

    wait_until(everything_acknowledged)
    after_consume = scrape(broker.http)
    assert after_consume.value("pulsar_out_messages_total", **labels) == 1000
    assert after_consume.value("pulsar_out_bytes_total", **labels) > 0
    assert after_consume.value("pulsar_rate_out", **labels) > 0
    assert after_consume.value("pulsar_throughput_out", **labels) > 0
    consumer.close()


def test_dedup_and_fencing_counters(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = new_topic()
    labels = {"cluster": "standalone", "namespace": NAMESPACE, "topic": topic}
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    for seq in range(1, 4):
        producer.send(b"x", sequence_id=seq)
    assert scrape(broker.http).value("magnetar_dedup_duplicates_total", **labels) == 0
    for seq in (2, 3):
        duplicate = producer.send(b"x", sequence_id=seq)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
    result = scrape(broker.http)
    assert result.value("magnetar_dedup_duplicates_total", **labels) == 2
    assert result.value("magnetar_dedup_unknown_total", **labels) == 0
    assert result.value("pulsar_in_messages_total", **labels) == 3  # duplicates are not stored
    assert result.value("magnetar_fenced_producers_total", **labels) == 0
    assert result.value("pulsar_producers_count", **labels) == 1

    fencer = client.create_producer(
        topic, producer_name="fencer", access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
    )
    fencer.send(b"y")
    after = scrape(broker.http)
    assert after.value("magnetar_fenced_producers_total", **labels) == 1
    assert after.value("pulsar_producers_count", **labels) == 1
    fencer.close()


def test_idempotency_key_counters(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = new_topic()
    labels = {"cluster": "standalone", "namespace": NAMESPACE, "topic": topic}
    key = "magnetar.idempotency-key"
    plain = client.create_producer(topic, batching_enabled=False)
    first = plain.send(b"a", properties={key: "order-1"})
    plain.send(b"b", properties={key: "order-2"})
    again = plain.send(b"a", properties={key: "order-1"})  # a retry: the first copy's id
    assert again == first
    before = scrape(broker.http)
    assert before.value("magnetar_idempotency_keys", **labels) == 2
    assert before.value("magnetar_idempotency_duplicates_total", **labels) == 1
    assert before.value("magnetar_idempotency_hidden_messages_total", **labels) == 0
    # A batch with one new key and one already seen: stored once, the old one hidden.
    batched = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    batched.send_async(b"c", None, properties={key: "order-3"})
    batched.send_async(b"b", None, properties={key: "order-2"})
    batched.flush()
    after = scrape(broker.http)
    assert after.value("magnetar_idempotency_keys", **labels) == 3
    assert after.value("magnetar_idempotency_hidden_messages_total", **labels) == 1
    assert after.value("magnetar_idempotency_duplicates_total", **labels) == 2
    assert after.value("magnetar_idempotency_in_flight_total", **labels) == 0


@pytest.mark.parametrize("per_topic", [True, False])
def test_topic_labels_follow_the_config(tmp_path: Path, per_topic: bool) -> None:
    config = broker_config(tmp_path / "data", expose_topic_level_metrics_in_prometheus=per_topic)
    broker = BrokerThread(config).start()
    client = new_client(broker.url)
    try:
        first, second = new_topic(), new_topic()
        produce_batched(client, first, 3)
        produce_batched(client, second, 5)
        result = scrape(broker.http)
        namespace = {"cluster": "standalone", "namespace": NAMESPACE}
        label_sets = result.label_sets("pulsar_in_messages_total")
        if per_topic:
            assert sorted(s["topic"] for s in label_sets) == sorted([first, second])
            assert result.value("pulsar_in_messages_total", **namespace, topic=first) == 3
            assert result.value("pulsar_in_messages_total", **namespace, topic=second) == 5
        else:
            assert label_sets == [namespace]
            assert result.value("pulsar_in_messages_total", **namespace) == 8
            assert result.value("pulsar_storage_write_latency_count", **namespace) >= 2
            assert all("topic" not in dict(labels) for _, labels in result.samples)
        assert result.value("pulsar_topics_count", **namespace) == 2
    finally:
        close_client(client)
        broker.stop()


def test_dedup_unknown_answers_are_counted(tmp_path: Path) -> None:
    """A resend of a sequence id whose first write is still waiting for its group commit gets
    dedup's "unknown" answer (a SEND_ERROR the client retries): counted, and not stored."""
    config = broker_config(tmp_path / "data", journal_max_group_wait_msec=500.0)
    broker = BrokerThread(config).start()
    topic = new_topic()
    labels = {"cluster": "standalone", "namespace": NAMESPACE, "topic": topic}
    try:
        with RawConnection(broker.port) as conn:
            conn.handshake()
            conn.create_producer(topic, 1, "raw")
            entry = encode_entry(
                pb.MessageMetadata(
                    producer_name="raw", sequence_id=1, publish_time=int(time.time() * 1000)
                ),
                b"once",
            )
            conn.send(commands.send(1, 1, entry) + commands.send(1, 1, entry))
            conn.read_until(lambda _frames: len(send_outcomes(conn)) == 2)
            outcomes = send_outcomes(conn)
        # Answers keep the SENDs' order: the first one's receipt (stored, not a duplicate's
        # -1:-1), then the second one's error.
        sequence_id, stored_at = outcomes[0]
        assert sequence_id == 1
        assert stored_at != "-1:-1"
        assert outcomes[1] == (1, pb.ServerError.PersistenceError)
        result = scrape(broker.http)
        assert result.value("magnetar_dedup_unknown_total", **labels) == 1
        assert result.value("magnetar_dedup_duplicates_total", **labels) == 0
        assert result.value("pulsar_in_messages_total", **labels) == 1
    finally:
        broker.stop()


def test_a_deleted_or_unloaded_topic_leaves_no_series(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    """Labels per topic are read from the loaded topics at each scrape, so a topic that is gone
    takes its series with it: clients creating and deleting topics cannot grow /metrics."""
    kept, deleted, unloaded = new_topic(), new_topic(), new_topic()
    for topic in (kept, deleted, unloaded):
        produce_batched(client, topic, 2)
    assert {s["topic"] for s in scrape(broker.http).label_sets("pulsar_in_messages_total")} == {
        kept,
        deleted,
        unloaded,
    }
    _admin(broker, "DELETE", deleted)
    _admin(broker, "PUT", unloaded, "/unload")
    result = scrape(broker.http)
    for family in FAMILIES:
        if family not in BROKER_LEVEL:
            assert {s.get("topic") for s in result.label_sets(family)} <= {kept}, family
    assert result.value("pulsar_topics_count", cluster="standalone", namespace=NAMESPACE) == 1


def _admin(broker: BrokerThread, method: str, topic: str, suffix: str = "") -> None:
    path = topic.replace("persistent://", "/admin/v2/persistent/") + suffix
    request = urllib.request.Request(f"{broker.http}{path}", method=method)
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status in (200, 204)
