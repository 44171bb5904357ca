"""Unloading a bundle moves it to another broker, while a PIP-6 producer keeps sending."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable

import mmh3
import pulsar

from tests.cluster.conftest import Cluster, http_lookup_owner, read_ids
from tests.helpers import close_client, new_client, wait_until

TOPIC = "persistent://public/default/moving"


def put_following_redirects(web_port: int, path: str) -> int:
    """PUT as pulsar-admin does: a 307 is followed to the owner with the same method."""
    host, port = "127.0.0.1", web_port
    for _ in range(5):
        connection = http.client.HTTPConnection(host, port, timeout=30)
        connection.request("PUT", path)
        reply = connection.getresponse()
        reply.read()
        connection.close()
        if reply.status != 307:
            return reply.status
        location = urllib.parse.urlsplit(reply.getheader("Location") or "")
        host, port = location.hostname or host, location.port or port
        path = location.path + (f"?{location.query}" if location.query else "")
    raise AssertionError("too many redirects")


def bundle_of_topic(web_port: int, topic: str) -> str:
    """The range holding ``topic`` (the brokers' hash), found through the bundles API."""
    url = f"http://127.0.0.1:{web_port}/admin/v2/namespaces/public/default/bundles"
    with urllib.request.urlopen(url, timeout=10) as reply:
        boundaries = json.loads(reply.read())["boundaries"]
    code = mmh3.hash(topic, 0, signed=False)
    bounds = [int(b, 16) for b in boundaries]
    for lower, upper in itertools.pairwise(bounds):
        if lower <= code < upper or (upper == bounds[-1] and code == upper):
            return f"0x{lower:08x}_0x{upper:08x}"
    raise AssertionError("no bundle holds the hash")


def test_unloading_a_bundle_moves_it_while_a_producer_sends(cluster: Cluster) -> None:
    first = cluster.brokers[0]
    count, moves = 6000, 3
    acked: set[int] = set()
    errors: list[pulsar.Result] = []
    client = new_client(cluster.service_url, operation_timeout=60, io_threads=1)
    stop = threading.Event()
    try:
        producer = client.create_producer(
            TOPIC,
            producer_name="mover",
            send_timeout_millis=0,
            block_if_queue_full=True,
            batching_enabled=True,
            batching_max_publish_delay_ms=1,
        )

        def callback_for(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    acked.add(seq)
                else:
                    errors.append(result)

            return done

        def send_all() -> None:
            for seq in range(1, count + 1):
                producer.send_async(f"{seq}".encode(), callback_for(seq), sequence_id=seq)
                if seq % 100 == 0 and stop.wait(0.05):  # paced, so the moves land mid-stream
                    return  # the test failed and ended: stop sending

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        bundle = bundle_of_topic(first.web_port, TOPIC)
        owners = [http_lookup_owner(first.web_port, TOPIC)]
        for move in range(1, moves + 1):
            threshold = count * move // (moves + 2)
            wait_until(lambda: len(acked) >= threshold, 60)  # noqa: B023 - used at once
            assert sender.is_alive(), "the stream ended before the unload"
            path = f"/admin/v2/namespaces/public/default/{bundle}/unload"
            assert put_following_redirects(first.web_port, path) == 204
            before = len(acked)
            wait_until(lambda: len(acked) > before, 60)  # noqa: B023 - used at once
            owners.append(http_lookup_owner(first.web_port, TOPIC))
            assert owners[-1] != owners[-2], owners  # it moved
        sender.join(120)
        wait_until(lambda: len(acked) == count, 120)
    finally:
        stop.set()
        close_client(client)
    assert errors == []
    stored = read_ids(cluster.service_url, TOPIC)
    assert stored == list(range(1, count + 1))  # no loss, no duplicate, in order
