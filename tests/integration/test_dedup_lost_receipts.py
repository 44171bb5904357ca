"""Lost send receipts through ``tests.tcp_proxy.TcpProxy``, with the official client.

Pulsar's DeduplicationEndToEndTest (E1-E3: what dedup does and does not fix when a receipt is
lost and the application resends) and the R6 scenario: 1 % of SEND_RECEIPTs dropped while a
producer with a fixed name and explicit ids streams; the client's own retries (it reconnects
and resends everything pending when a receipt arrives out of turn) must leave exactly one copy
of each message. Also checks the proxy's own faults (cut, stall) so other tests can rely on it.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from broker.admin.stats import dedup_stats
from protocol import Frame, pb
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, new_client
from tests.tcp_proxy import Direction, TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]

SEND_RECEIPT = pb.BaseCommand.SEND_RECEIPT


def new_topic() -> str:
    return f"persistent://public/default/lost-{uuid.uuid4().hex[:10]}"


def read_all(url: str, topic: str) -> list[bytes]:
    client = new_client(url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        client.close()


def first_receipt_only() -> Callable[[Direction, Frame], bool]:
    """A filter dropping the first SEND_RECEIPT that passes, and nothing else."""
    dropped = threading.Event()

    def predicate(direction: Direction, frame: Frame) -> bool:
        is_receipt = direction is Direction.TO_CLIENT and frame.type == SEND_RECEIPT
        if is_receipt and not dropped.is_set():
            dropped.set()
            return True
        return False

    return predicate


@pytest.fixture
def proxy(broker: BrokerThread) -> Iterator[TcpProxy]:
    with TcpProxy(("127.0.0.1", broker.port)) as running:
        yield running


def set_topic_dedup(broker: BrokerThread, topic: str, enabled: bool) -> None:
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/deduplicationEnabled"
    request = urllib.request.Request(
        broker.http + path, data=str(enabled).lower().encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204


# --------------------------------------------------------------------------- E1-E3


@pytest.mark.parametrize(
    ("dedup", "explicit_id", "copies"),
    [
        (False, True, 2),  # E1: no dedup, the resend is a second message
        (True, False, 2),  # E2: dedup, but the resend gets a fresh (auto) sequence id
        (True, True, 1),  # E3: dedup with the same sequence id: one copy
    ],
)
def test_e1_e3_application_resend_after_a_lost_receipt(
    broker: BrokerThread, proxy: TcpProxy, dedup: bool, explicit_id: bool, copies: int
) -> None:
    topic = new_topic()
    client = new_client(proxy.url)
    try:
        producer = client.create_producer(
            topic, producer_name="e-producer", batching_enabled=False, send_timeout_millis=1000
        )
        set_topic_dedup(broker, topic, dedup)
        # Not 0: the Python wrapper drops a falsy sequence_id and assigns the next automatic one.
        kwargs: dict[str, Any] = {"sequence_id": 7} if explicit_id else {}
        proxy.drop_frames(first_receipt_only())
        with pytest.raises(pulsar.Timeout):
            producer.send(b"payload", **kwargs)
        assert len(proxy.dropped_of(SEND_RECEIPT)) == 1  # the fault did bite
        producer.send(b"payload", **kwargs)  # the application's resend
    finally:
        client.close()
    assert read_all(broker.url, topic) == [b"payload"] * copies


# --------------------------------------------------------------------------- R6: 1 % lost


@pytest.mark.parametrize("batching", [False, True])
def test_one_percent_of_receipts_lost_leaves_exactly_one_copy(
    broker: BrokerThread, proxy: TcpProxy, batching: bool
) -> None:
    topic = new_topic()
    count = 3000
    acked: set[int] = set()
    failures: list[pulsar.Result] = []
    lock = threading.Lock()
    client = new_client(proxy.url)
    try:
        producer = client.create_producer(
            topic,
            producer_name="lossy-link",
            batching_enabled=batching,
            batching_max_messages=5,
            batching_max_publish_delay_ms=1,
            send_timeout_millis=0,  # never give up: the client retries on its own
            block_if_queue_full=True,
            max_pending_messages=500,
        )
        proxy.drop_fraction(SEND_RECEIPT, 0.01, seed=20261122)

        def done(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        acked.add(seq)
                    else:
                        failures.append(result)

            return callback

        for seq in range(count):
            producer.send_async(f"{seq}".encode(), done(seq), sequence_id=seq)
        # A receipt lost at the very end has no later receipt to reveal it. When progress
        # stops, a connection reset does (the client resends what is pending), as a failed
        # keepalive would in production.
        deadline = time.monotonic() + 60
        seen = -1
        while len(acked) < count and time.monotonic() < deadline:
            time.sleep(1.0)
            if len(acked) == seen:
                proxy.drop_frames(None)
                proxy.cut()
            seen = len(acked)
        assert failures == []
        assert len(acked) == count
        assert len(proxy.dropped_of(SEND_RECEIPT)) >= 2  # the faults did bite
    finally:
        client.close()
    stored = [int(data) for data in read_all(broker.url, topic)]
    assert stored == list(range(count))  # exactly once, in order, none missing
    topic_stats = broker.call(lambda: _dedup_stats(broker, topic))
    assert topic_stats["duplicatesDropped"] >= 1  # the retries really reached the broker


async def _dedup_stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    assert broker.broker is not None
    assert broker.broker.service is not None
    loaded = broker.broker.service.loaded_topic(TopicName.parse(topic))
    assert loaded is not None
    return dedup_stats(loaded)


# --------------------------------------------------------------------------- the proxy itself


def test_proxy_cut_and_stall_are_survived_without_duplicates(
    broker: BrokerThread, proxy: TcpProxy
) -> None:
    topic = new_topic()
    client = new_client(proxy.url)
    try:
        producer = client.create_producer(
            topic, producer_name="p", batching_enabled=False, send_timeout_millis=0
        )
        producer.send(b"0", sequence_id=0)
        assert proxy.cut() >= 1
        producer.send(b"1", sequence_id=1)  # after a reconnect
        proxy.stall()
        results: list[pulsar.Result] = []
        producer.send_async(b"2", lambda result, _id: results.append(result), sequence_id=2)
        time.sleep(0.3)
        assert results == []  # held by the stalled link
        proxy.resume()
        producer.flush()
        assert results == [pulsar.Result.Ok]
        assert proxy.connections_accepted >= 2
    finally:
        client.close()
    assert read_all(broker.url, topic) == [b"0", b"1", b"2"]


def test_proxy_refuses_connections_while_told_to(broker: BrokerThread, proxy: TcpProxy) -> None:
    proxy.refuse(True)
    client = pulsar.Client(
        proxy.url,
        operation_timeout_seconds=1,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(new_topic())
        proxy.refuse(False)
        client.create_producer(new_topic()).send(b"x")
    finally:
        client.close()
