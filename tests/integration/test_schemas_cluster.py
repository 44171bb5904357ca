"""Schema compatibility in cluster mode: the schema policies and versions live in etcd, so a
strategy set through one broker judges the producers of every broker, and a schema one broker
stored is the version another checks against."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from tests.cluster.conftest import (
    Cluster,
    Etcd,
    free_port,
    http_lookup_owner,
    start_etcd,
    stop_process,
)
from tests.helpers import close_client, new_client, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]


class Person(Record):
    name = String()
    age = Integer()


class PersonStrictAge(Record):  # FORWARD-compatible with Person, not FULL
    _sorted_fields = True
    name = String()
    age = Integer(required=True)


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[Cluster]:
    etcd: Etcd = start_etcd(tmp_path / "etcd", tmp_path / "etcd.log", free_port(), free_port())
    cluster = Cluster(etcd, tmp_path / "data", f"test-{uuid.uuid4().hex[:8]}")
    try:
        cluster.add_broker()
        cluster.add_broker()
        yield cluster
    finally:
        cluster.stop()
        stop_process(etcd.proc)


def _strategy_seen_by(web_port: int) -> str:
    url = f"http://127.0.0.1:{web_port}/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
    with urllib.request.urlopen(url, timeout=10) as reply:
        strategy: str = json.loads(reply.read())
        return strategy


def _topics_on_both(cluster: Cluster) -> list[str]:
    """Topics until each broker owns one (the bundles are placed on first lookup)."""
    by_owner: dict[str, str] = {}
    for _ in range(64):
        topic = f"persistent://public/default/schema-{uuid.uuid4().hex[:8]}"
        by_owner.setdefault(http_lookup_owner(cluster.brokers[0].web_port, topic), topic)
        if len(by_owner) == len(cluster.brokers):
            return list(by_owner.values())
    raise AssertionError(f"every topic landed on {list(by_owner)}")


def test_a_strategy_set_through_one_broker_judges_every_broker(two_brokers: Cluster) -> None:
    first, second = two_brokers.brokers
    topics = _topics_on_both(two_brokers)
    client = new_client(two_brokers.service_url, operation_timeout=30)
    try:
        for topic in topics:
            client.create_producer(topic, schema=AvroSchema(Person))
            with pytest.raises(pulsar.IncompatibleSchema):  # FULL, the broker default
                client.create_producer(topic, schema=AvroSchema(PersonStrictAge))
        request = urllib.request.Request(
            f"{second.http}/admin/v2/namespaces/public/default/schemaCompatibilityStrategy",
            data=b'"FORWARD"',
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 204
        wait_until(lambda: _strategy_seen_by(first.web_port) == "FORWARD", 10)
        for topic in topics:
            client.create_producer(topic, schema=AvroSchema(PersonStrictAge))
    finally:
        close_client(client)
