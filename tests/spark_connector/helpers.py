"""Helpers for the Spark connector tests: publish, read back, a fixed-port broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from client.message_id import MessageId
from client.sync import Client
from protocol.row_hash import row_hash64
from tests.helpers import REPO, BrokerProcess

SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.stopTimeout": "10s",
}


@dataclass(frozen=True)
class Sent:
    """A message as the tests compare it."""

    value: bytes
    key: bytes | None = None
    properties: tuple[tuple[str, str], ...] = ()
    event_time: int | None = None


def produce(url: str, topic: str, messages: list[Sent], *, batching: bool = False) -> None:
    """Publish ``messages`` with our client (batched entries when ``batching``)."""
    client = Client(url)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=batching,
            batching_max_messages=4,
            batching_max_publish_delay_ms=60_000,
        )
        for message in messages:
            producer.send_async(
                message.value,
                None,
                properties=dict(message.properties) or None,
                partition_key=message.key.decode() if message.key else None,
                event_timestamp=message.event_time,
            )
        producer.flush()
        producer.close()
    finally:
        client.close()


def consume_all(url: str, topic: str) -> list[Sent]:
    """Every message of ``topic`` from the earliest, as ``Sent`` records."""
    client = Client(url)
    try:
        reader = client.create_reader(topic, MessageId.earliest)
        out = []
        while reader.has_message_available():
            message = reader.read_next(10_000)
            key = message.partition_key()
            out.append(
                Sent(
                    message.data(),
                    key.encode() if key else None,
                    tuple(sorted(message.properties().items())),
                    message.event_timestamp() or None,
                )
            )
        reader.close()
        return out
    finally:
        client.close()


def values(messages: list[Sent]) -> list[bytes]:
    return [m.value for m in messages]


def sink_order(rows: list[bytes]) -> list[bytes]:
    """The order an exactly-once task sends rows that have only a value to sort by: by the
    fixed ``rowhash64`` of the value, ties by the bytes (README, "Exactly-once, how")."""
    return sorted(rows, key=lambda value: (row_hash64(value), value))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class FixedPortBroker(BrokerProcess):
    """A subprocess broker on ports chosen once, so a restart keeps the service URL.

    Ready when its binary port accepts connections (the ports are known: no log parsing).
    """

    def __init__(self, data_dir: Path) -> None:
        self.fixed_port = free_port()
        self.fixed_web_port = free_port()
        super().__init__(
            data_dir,
            f"brokerServicePort={self.fixed_port}",
            f"webServicePort={self.fixed_web_port}",
        )

    def start(self, timeout: float = 30) -> FixedPortBroker:
        args = [sys.executable, "-m", "broker", "standalone"]
        for setting in (
            f"dataDir={self.data_dir}",
            "bindAddress=127.0.0.1",
            "advertisedAddress=127.0.0.1",
            *self.settings,
        ):
            args += ["--set", setting]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: {self.log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.fixed_port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
                continue
            self.port, self.web_port = self.fixed_port, self.fixed_web_port
            return self
        raise TimeoutError("broker process did not start")


def run_spark_job(module: str, *args: str, timeout: float = 300) -> None:
    """Run ``python -m tests.spark_connector.<module> *args`` (a Spark job in a process of its
    own, for settings a shared session cannot change: ``local[2,3]`` retries, Arrow batch
    sizes) with this interpreter for Spark's Python workers; fails with the end of its output."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-m", f"tests.spark_connector.{module}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
