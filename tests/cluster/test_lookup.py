"""Cluster mode, three brokers + etcd: lookups redirect as Pulsar's do and clients follow them."""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections import Counter

import pulsar

from client.message_id import MessageId
from client.sync import Client as OurClient
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import Frame
from tests.cluster.conftest import Cluster, http_lookup_owner
from tests.helpers import close_client, new_client
from tests.raw_client import RawSession

LookupType = pb.CommandLookupTopicResponse


def binary_lookup(port: int, topic: str, *, authoritative: bool = False) -> Frame:
    with RawSession(port) as session:
        reply = session.request(commands.lookup(topic, 1, authoritative=authoritative), 1)
    return reply


def test_lookups_redirect_to_the_candidate_which_then_owns_the_bundle(cluster: Cluster) -> None:
    first = cluster.brokers[0]
    ports = {b.url: b.port for b in cluster.brokers}
    redirects = 0
    owners: dict[str, str] = {}
    for index in range(12):
        topic = f"persistent://public/default/lookup-{index}"
        answer = binary_lookup(first.port, topic).command.lookupTopicResponse
        assert answer.response in (LookupType.Connect, LookupType.Redirect)
        assert answer.authoritative
        if answer.response == LookupType.Redirect:
            redirects += 1
            # As a client does: ask the candidate again, authoritatively: it takes the bundle.
            again = binary_lookup(ports[answer.brokerServiceUrl], topic, authoritative=True)
            answer = again.command.lookupTopicResponse
            assert answer.response == LookupType.Connect
        owners[topic] = answer.brokerServiceUrl
    assert redirects > 0
    assert len(set(owners.values())) >= 2  # 4 bundles placed on the least loaded brokers
    for topic, owner in owners.items():  # every broker now names the same owner
        for broker in cluster.brokers:
            reply = binary_lookup(broker.port, topic).command.lookupTopicResponse
            assert (reply.response, reply.brokerServiceUrl) == (LookupType.Connect, owner)
            assert http_lookup_owner(broker.web_port, topic) == owner


def test_a_broker_refuses_topics_of_bundles_it_does_not_own(cluster: Cluster) -> None:
    topic = "persistent://public/default/refused"
    owner = http_lookup_owner(cluster.brokers[0].web_port, topic)
    other = next(b for b in cluster.brokers if b.url != owner)
    with RawSession(other.port) as session:
        reply = session.request(commands.producer(topic, 1, 7, producer_name="p"), 7)
    assert reply.command.error.error == ServerError.ServiceNotReady


def test_admin_calls_are_redirected_to_the_owner(cluster: Cluster) -> None:
    topic = "public/default/admin-redirect"
    owner = cluster.by_url(http_lookup_owner(cluster.brokers[0].web_port, f"persistent://{topic}"))
    other = next(b for b in cluster.brokers if b is not owner)
    connection = http.client.HTTPConnection("127.0.0.1", other.web_port, timeout=10)
    connection.request("PUT", f"/admin/v2/persistent/{topic}")
    reply = connection.getresponse()
    assert reply.status == 307
    assert reply.getheader("Location") == f"{owner.http}/admin/v2/persistent/{topic}"
    connection.close()
    request = urllib.request.Request(f"{owner.http}/admin/v2/persistent/{topic}", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as created:
        assert created.status == 204
    # urllib follows the 307 for a GET: the stats come from the owner, wherever one asks.
    with urllib.request.urlopen(f"{other.http}/admin/v2/persistent/{topic}/stats") as stats:
        assert "publishers" in json.loads(stats.read())


def test_partitions_spread_and_the_official_client_follows_redirects(cluster: Cluster) -> None:
    topic = "persistent://public/default/spread"
    request = urllib.request.Request(
        f"{cluster.brokers[0].http}/admin/v2/persistent/public/default/spread/partitions",
        data=b"8",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as created:
        assert created.status == 204
    client = new_client(cluster.brokers[0].url)
    try:
        producer = client.create_producer(topic, producer_name="spreader", batching_enabled=False)
        for index in range(80):
            producer.send(f"{index}".encode(), partition_key=f"key-{index}")
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        got = sorted(int(consumer.receive(10_000).data()) for _ in range(80))
        assert got == list(range(80))
    finally:
        close_client(client)
    owners = Counter(
        http_lookup_owner(cluster.brokers[0].web_port, f"{topic}-partition-{i}") for i in range(8)
    )
    assert len(owners) >= 2, owners


def test_our_client_follows_redirects(cluster: Cluster) -> None:
    topics = [f"persistent://public/default/ours-{i}" for i in range(6)]
    with OurClient(cluster.brokers[1].url) as client:
        for topic in topics:
            producer = client.create_producer(topic, producer_name=f"ours-{topic[-1]}")
            producer.send(topic.encode())
            producer.close()
        for topic in topics:
            reader = client.create_reader(topic, MessageId.earliest)
            assert reader.read_next(10_000).data() == topic.encode()
            reader.close()
    owners = {http_lookup_owner(cluster.brokers[1].web_port, t) for t in topics}
    assert len(owners) >= 2
