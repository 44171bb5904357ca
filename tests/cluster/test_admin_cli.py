"""``magnetar-admin`` against a cluster: it follows 307s for writes too (pulsar-admin does),
lists brokers and bundles, and ``namespaces unload -b … -d …`` moves a bundle."""

from __future__ import annotations

import json

import pulsar
from click.testing import CliRunner

from broker.admin_cli import main
from broker.cluster.bundles import bundle_of
from protocol.topic_name import TopicName
from tests.cluster.conftest import Cluster, http_lookup_owner
from tests.helpers import close_client, new_client

TOPIC = "persistent://public/default/cli-moved"


def cli(web_port: int, *args: str) -> str:
    result = CliRunner().invoke(
        main, ["--admin-url", f"http://127.0.0.1:{web_port}", *args], catch_exceptions=False
    )
    assert result.exit_code == 0, (args, result.output)
    return result.output


def test_admin_cli_follows_redirects_and_moves_a_bundle(cluster: Cluster) -> None:
    first = cluster.brokers[0]
    brokers = json.loads(cli(first.web_port, "brokers", "list", cluster.name, "--json"))
    assert sorted(brokers) == sorted(f"127.0.0.1:{b.web_port}" for b in cluster.brokers)
    bundles = json.loads(cli(first.web_port, "namespaces", "bundles", "public/default", "--json"))
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
    assert "Unloaded" in cli(others[0].web_port, "topics", "unload", TOPIC)

    # Move the topic's bundle to a chosen broker, asking another one.
    bundle = bundle_of(TopicName.parse(TOPIC), count).range_name
    target = others[1]
    out = cli(
        others[0].web_port,
        "namespaces",
        "unload",
        "public/default",
        "--bundle",
        bundle,
        "--destinationBroker",
        f"127.0.0.1:{target.web_port}",
    )
    assert "Unloaded 1 bundle(s)" in out
    assert http_lookup_owner(first.web_port, TOPIC) == target.url

    client = new_client(cluster.service_url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"before"
    finally:
        close_client(client)
