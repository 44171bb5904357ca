"""Issue #16: a non-replayable source whose receipts get lost (``tests.tcp_proxy``), official
client. Each request is retried with the same key through a *new* producer (a new name: PIP-6
cannot recognise the retry). With the window every request is stored once; the control with the
window off stores one duplicate per lost receipt."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from protocol import pb
from tests.helpers import BrokerThread, broker_config, new_client
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]

REQUESTS = 40
KEY = "magnetar.idempotency-key"


@pytest.fixture(params=[120, 0], ids=["window", "control-window-off"])
def window_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerThread]:
    running = BrokerThread(
        broker_config(tmp_path / "data", idempotency_window_seconds=request.param)
    ).start()
    try:
        yield running
    finally:
        running.stop()


def test_retried_requests_are_stored_once(window_broker: BrokerThread) -> None:
    topic = f"persistent://public/default/idem-lost-{uuid.uuid4().hex[:8]}"
    window_on = window_broker.config.idempotency_window_seconds > 0
    with TcpProxy(("127.0.0.1", window_broker.port)) as proxy:
        client = new_client(proxy.url)
        try:
            proxy.drop_fraction(pb.BaseCommand.SEND_RECEIPT, 0.15, seed=11)
            producer = client.create_producer(
                topic, batching_enabled=False, send_timeout_millis=400
            )
            retries = 0
            for request in range(REQUESTS):
                key = f"request-{request}"
                while True:
                    try:
                        producer.send(key.encode(), properties={KEY: key})
                        break
                    except pulsar.Timeout:
                        retries += 1
                        producer.close()  # a stateless sender: the retry comes from elsewhere
                        producer = client.create_producer(
                            topic, batching_enabled=False, send_timeout_millis=400
                        )
            lost = len(proxy.dropped_of(pb.BaseCommand.SEND_RECEIPT))
            proxy.drop_frames(None)
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            seen: list[bytes] = []
            while reader.has_message_available():
                seen.append(reader.read_next(5000).data())
        finally:
            client.close()
    assert lost > 0  # the fault bit
    assert retries == lost
    assert set(seen) == {f"request-{r}".encode() for r in range(REQUESTS)}
    if window_on:
        assert len(seen) == REQUESTS
    else:
        assert len(seen) == REQUESTS + lost  # every lost receipt made a second copy
