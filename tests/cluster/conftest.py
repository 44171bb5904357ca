"""Cluster-mode fixtures: a real etcd on loopback and brokers as subprocesses sharing a dataDir.

etcd cannot listen on port 0 and report the port, so free ports are picked by binding port 0
and closing (a tiny race with other processes, acceptable on a test machine). One etcd serves
the whole session; each test gets its own ``clusterName``, hence its own key prefix.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest
from click.testing import CliRunner

from broker.admin_cli import main as admin_main
from broker.cluster.bundles import bundle_of
from protocol.topic_name import TopicName
from tests.helpers import BrokerProcess, close_client, new_client, wait_until

LEASE_TTL_MS = 3000  # short, so takeovers happen within seconds in tests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Etcd:
    proc: subprocess.Popen[bytes]
    client_port: int

    @property
    def url(self) -> str:
        return f"etcd:http://127.0.0.1:{self.client_port}"

    def healthy(self) -> bool:
        try:
            health = f"http://127.0.0.1:{self.client_port}/health"
            with urllib.request.urlopen(health, timeout=1) as reply:
                return b'"true"' in reply.read()
        except OSError:
            return False


def start_etcd(data_dir: Path, log_path: Path, client_port: int, peer_port: int) -> Etcd:
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    args = [
        binary,
        "--name=test",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=test={peer}",
    ]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    etcd = Etcd(proc, client_port)
    try:
        wait_until(lambda: proc.poll() is not None or etcd.healthy(), 30)
    except AssertionError:
        pass  # reported below, with etcd's log
    if proc.poll() is not None or not etcd.healthy():
        proc.kill()
        raise RuntimeError(f"etcd did not start: {log_path.read_text()[-2000:]}")
    return etcd


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # a test may have left it stopped
        proc.kill()
        proc.wait(30)


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    base = tmp_path_factory.mktemp("etcd")
    server = start_etcd(base / "data", base / "etcd.log", free_port(), free_port())
    try:
        yield server
    finally:
        stop_process(server.proc)


@dataclass
class Cluster:
    """Brokers of one cluster over one shared ``dataDir``."""

    etcd: Etcd
    data_dir: Path
    name: str
    extra: tuple[str, ...] = ()
    brokers: list[BrokerProcess] = field(default_factory=list)

    def add_broker(self, *settings: str) -> BrokerProcess:
        index = len(self.brokers)
        broker = BrokerProcess(
            self.data_dir,
            f"metadataStoreUrl={self.etcd.url}",
            f"clusterName={self.name}",
            f"metadataStoreSessionTimeoutMillis={LEASE_TTL_MS}",
            *self.extra,
            *settings,
            log_path=self.data_dir.parent / f"broker-{index}.log",
        ).start()
        self.brokers.append(broker)
        return broker

    @property
    def service_url(self) -> str:
        """Every live broker's address: the official client tries them in turn."""
        hosts = [f"127.0.0.1:{b.port}" for b in self.alive()]
        return "pulsar://" + ",".join(hosts)

    def alive(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.proc is not None and b.proc.poll() is None]

    def by_url(self, url: str) -> BrokerProcess:
        for broker in self.brokers:
            if broker.url == url:
                return broker
        raise KeyError(url)

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.proc is not None:
                stop_process(broker.proc)


@pytest.fixture
def cluster(etcd: Etcd, tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers in a fresh cluster (own clusterName) sharing ``tmp_path/data``."""
    running = Cluster(etcd, tmp_path / "data", f"test-{uuid.uuid4().hex[:8]}")
    try:
        for _ in range(3):
            running.add_broker()
        yield running
    finally:
        running.stop()


def restart_on_same_ports(broker: BrokerProcess) -> BrokerProcess:
    """Start a killed broker again with its former ports (so its broker id, and the address in
    the clients' service URL, stay the same)."""
    ports = (f"brokerServicePort={broker.port}", f"webServicePort={broker.web_port}")
    if broker.settings[-2:] != ports:
        broker.settings = (*broker.settings, *ports)

    def started() -> bool:
        try:
            broker.start()
        except RuntimeError:
            return False  # the kernel may not have released the killed process's ports yet
        return True

    wait_until(started, 30)
    return broker


def http_lookup_owner(web_port: int, topic: str) -> str:
    """The owner's binary URL, by Pulsar's HTTP lookup on ``web_port`` (placing the bundle if
    nobody owns it: urllib follows the 307 to the candidate)."""
    path = topic.removeprefix("persistent://")
    url = f"http://127.0.0.1:{web_port}/lookup/v2/topic/persistent/{path}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        owner: str = json.loads(reply.read())["brokerUrl"]
    return owner


def admin_cli(web_port: int, *args: str) -> str:
    """``magnetar-admin --admin-url http://127.0.0.1:<web_port> <args>``: its output; fails the
    test unless it exits 0."""
    result = CliRunner().invoke(
        admin_main, ["--admin-url", f"http://127.0.0.1:{web_port}", *args], catch_exceptions=False
    )
    assert result.exit_code == 0, (args, result.output)
    return result.output


def read_ids(url: str, topic: str) -> list[int]:
    """Every message of ``topic`` from the start, each an integer in text."""
    client = new_client(url, operation_timeout=60, io_threads=1)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
        ids = []
        while reader.has_message_available():
            ids.append(int(reader.read_next(10_000).data()))
        return ids
    finally:
        close_client(client)


def move_bundle_with_cli(web_port: int, topic: str, bundles: int, target: BrokerProcess) -> str:
    """``magnetar-admin namespaces unload <ns> --bundle <topic's range> --destinationBroker``,
    asking the broker at ``web_port``; the command's output."""
    name = TopicName.parse(topic)
    return admin_cli(
        web_port,
        "namespaces",
        "unload",
        str(name.namespace_name),
        "--bundle",
        bundle_of(name, bundles).range_name,
        "--destinationBroker",
        f"127.0.0.1:{target.web_port}",
    )
