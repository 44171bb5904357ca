"""Broker restarts under load (subprocess broker, SIGTERM and SIGKILL).

Promises checked: every message whose send was acknowledged (a receipt) is in the topic after the
restart; a durable subscription resumes after its last persisted acknowledgement, so nothing it
acknowledged before the last cursor persist comes back and nothing unacknowledged is lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TOPIC = "persistent://public/default/restart-test"


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url,
        operation_timeout_seconds=20,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


class LoadProducer:
    """Sends async with explicit sequence ids; records the ids that got a real receipt."""

    def __init__(self, client: pulsar.Client) -> None:
        self.producer = client.create_producer(
            TOPIC,
            producer_name="restart-producer",
            send_timeout_millis=0,
            block_if_queue_full=True,
            max_pending_messages=500,
            batching_enabled=True,
            batching_max_publish_delay_ms=2,
        )
        self.acked: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _callback(self, seq: int) -> object:
        def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                with self._lock:
                    self.acked.add(seq)

        return done

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set() and seq < 200_000:
            try:
                self.producer.send_async(
                    f"msg-{seq}".encode(), self._callback(seq), sequence_id=seq
                )
            except Exception:
                return
            seq += 1
            self.sent = seq

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()


def _read_all(url: str) -> list[bytes]:
    client = _client(url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_acknowledged_sends_survive_restart_under_load(tmp_path: Path, how: str) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        client = _client(broker.url)
        load = LoadProducer(client)
        load.start()
        deadline = time.monotonic() + 20
        while len(load.acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(load.acked) >= 2000
        if how == "sigterm":
            assert broker.terminate() == 0
        else:
            broker.kill()
        acked_before = set(load.acked)
        load.stop()
        with contextlib.suppress(pulsar.PulsarException):
            client.close()  # may report NotConnected: its broker just died
        load.join()  # closing the client unblocks a send waiting for queue space
        broker.restart()
        stored = _read_all(broker.url)
        stored_ids = [int(m.split(b"-")[1]) for m in stored]
        assert acked_before <= set(stored_ids), "an acknowledged send was lost"
        assert len(stored_ids) == len(set(stored_ids)), "a message is stored twice"
    finally:
        broker.kill()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_durable_subscription_resumes_after_persisted_acks(tmp_path: Path, how: str) -> None:
    broker = BrokerProcess(tmp_path / "data", "managedLedgerCursorPersistIntervalMs=100").start()
    try:
        client = _client(broker.url)
        consumer = client.subscribe(
            TOPIC, "durable", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(100):
            producer.send(f"{i}".encode())
        for _ in range(60):
            msg = consumer.receive(5000)
            consumer.acknowledge(msg)
        # Acks are grouped by the client (100 ms) and persisted by the broker every 100 ms.
        time.sleep(1.0)
        if how == "sigterm":
            assert broker.terminate() == 0
        else:
            broker.kill()
        with contextlib.suppress(pulsar.PulsarException):
            client.close()
        broker.restart()
        client = _client(broker.url)
        consumer = client.subscribe(TOPIC, "durable")
        rest = []
        while True:
            try:
                msg = consumer.receive(1000)
            except pulsar.Timeout:
                break
            rest.append(int(msg.data()))
            consumer.acknowledge(msg)
        assert rest == list(range(60, 100))
        client.close()
    finally:
        broker.kill()
