"""``magnetar-admin`` against a cluster: it follows 307s for writes too (pulsar-admin does),
lists brokers and bundles, and ``namespaces unload -b … -d …`` moves a bundle."""

from __future__ import annotations

import json

import pulsar

from tests.cluster.conftest import Cluster, admin_cli, http_lookup_owner, move_bundle_with_cli
from tests.helpers import close_client, new_client

TOPIC = "persistent://public/default/cli-moved"


def test_admin_cli_follows_redirects_and_moves_a_bundle(cluster: Cluster) -> None:
    first = cluster.brokers[0]
    brokers = json.loads(admin_cli(first.web_port, "brokers", "list", cluster.name, "--json"))
    assert sorted(brokers) == sorted(f"127.0.0.1:{b.web_port}" for b in cluster.brokers)
    bundles = json.loads(
        admin_cli(first.web_port, "namespaces", "bundles", "public/default", "--json")
    )
    count = bundles["numBundles"]
    assert len(bundles["boundaries"]) == count + 1

    client = new_client(cluster.service_url)
    try:
        client.create_producer(TOPIC).send(b"before")
    finally:
        close_client(client)
    owner_url = http_lookup_owner(first.web_port, TOPIC)
    owner = cluster.by_url(owner_url)
    others = [b for b in cluster.brokers if b is not owner]

    # A write (PUT) sent to a broker that does not own the topic: answered 307, followed.
    assert "Unloaded" in admin_cli(others[0].web_port, "topics", "unload", TOPIC)

    # Move the topic's bundle to a chosen broker, asking another one.
    target = others[1]
    out = move_bundle_with_cli(others[0].web_port, TOPIC, count, target)
    assert "Unloaded 1 bundle(s)" in out
    assert http_lookup_owner(first.web_port, TOPIC) == target.url

    client = new_client(cluster.service_url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"before"
    finally:
        close_client(client)
