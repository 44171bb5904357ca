"""Connection teardown in awkward moments never leaves state behind on a topic."""

from __future__ import annotations

import socket
import time
import uuid

import pulsar
import pytest

from broker.admin.stats import stats_snapshot
from protocol import FrameDecoder, commands, pb
from protocol.enums import ProducerAccessMode
from protocol.metadata import encode_entry
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.compat]
T = pb.BaseCommand.Type


def _await_frame(sock: socket.socket, kind: int) -> None:
    decoder = FrameDecoder()
    sock.settimeout(5)
    while True:
        data = sock.recv(65536)
        assert data, "connection closed early"
        decoder.feed(data)
        if any(f.type == kind for f in decoder):
            return


def test_close_producer_then_disconnect_frees_the_exclusive_topic(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/close-race-{uuid.uuid4().hex[:8]}"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(commands.connect("raw", protocol_version=20))
        _await_frame(sock, T.CONNECTED)
        sock.sendall(
            commands.producer(
                topic, 1, 1, producer_name="holder", access_mode=ProducerAccessMode.Exclusive
            )
        )
        _await_frame(sock, T.PRODUCER_SUCCESS)
        metadata = pb.MessageMetadata(producer_name="holder", sequence_id=0, publish_time=1)
        # SEND and CLOSE_PRODUCER in one write, then vanish before the close completes.
        sock.sendall(
            commands.send(1, 0, encode_entry(metadata, b"last words"))
            + commands.close_producer(1, 2)
        )
    client = pulsar.Client(broker.url, operation_timeout_seconds=5)
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
                break
            except pulsar.ProducerFenced:
                assert time.monotonic() < deadline, "the closed holder still owns the topic"
                time.sleep(0.05)
    finally:
        client.close()


def test_unload_closes_producers_and_consumers_which_reconnect(broker: BrokerThread) -> None:
    import urllib.request

    local = f"unload-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub")
        producer.send(b"before")
        first = consumer.receive(5000)
        assert first.data() == b"before"
        consumer.acknowledge(first)
        time.sleep(0.3)  # the client groups acks for 100 ms

        async def connection_ids() -> set[int]:
            assert broker.broker is not None
            assert broker.broker.service is not None
            return {id(c) for c in broker.broker.service.connections}

        before = broker.call(connection_ids)
        request = urllib.request.Request(
            f"{broker.http}/admin/v2/persistent/public/default/{local}/unload", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204
        producer.send(b"after")  # reconnected to the reloaded topic, no error surfaces
        assert consumer.receive(5000).data() == b"after"

        async def publishers() -> int:
            assert broker.broker is not None
            assert broker.broker.service is not None
            return int(stats_snapshot(broker.broker.service.topics[topic])["publishers"])

        assert broker.call(publishers) == 1
        # Told to reconnect the producer, the client kept its socket: no SEND_ERROR made it drop
        # the whole connection (which would also have bounced the consumer).
        assert broker.call(connection_ids) == before
    finally:
        client.close()
