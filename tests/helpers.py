"""Shared test helpers: an in-process broker on its own event-loop thread, a subprocess broker.

The official ``pulsar`` client is blocking (C++ threads), so an in-process broker must run on a
loop of its own; ``BrokerThread`` gives each test a real broker on port 0 with ``tmp_path`` data.
``BrokerProcess`` runs ``python -m broker standalone`` so tests can SIGTERM / SIGKILL it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import uvloop

from broker.config import BrokerConfig
from broker.server import Broker
from broker.storage import FileLayer

R = TypeVar("R")
REPO = Path(__file__).resolve().parent.parent


def broker_config(data_dir: Path, **overrides: Any) -> BrokerConfig:
    base = BrokerConfig(
        data_dir=str(data_dir),
        broker_service_port=0,
        web_service_port=0,
        bind_address="127.0.0.1",
        advertised_address="127.0.0.1",
    )
    return replace(base, **overrides)


class BrokerThread:
    """A real broker serving on 127.0.0.1:0 from a background thread."""

    def __init__(self, config: BrokerConfig, *, file_layer: FileLayer | None = None) -> None:
        self.config = config
        self.file_layer = file_layer
        self.broker: Broker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="broker", daemon=True)

    def start(self) -> BrokerThread:
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            # The production event loop (uvloop), as `magnetar standalone` runs it.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._main())
        except BaseException as exc:  # surfaced to the test thread
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.broker = Broker(self.config, file_layer=self.file_layer)
        await self.broker.start()
        self._ready.set()
        await self._stop.wait()
        await self.broker.shutdown()

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    @property
    def web_port(self) -> int:
        assert self.broker is not None
        return self.broker.web_port

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def call(self, fn: Callable[[], Coroutine[Any, Any, R]], timeout: float = 30) -> R:
        """Run a coroutine on the broker's loop and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)


class BrokerProcess:
    """``python -m broker standalone`` in a subprocess (for SIGTERM / SIGKILL tests)."""

    def __init__(self, data_dir: Path, *settings: str, log_path: Path | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.log_path = log_path or data_dir.parent / f"{data_dir.name}-broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.web_port = 0

    def start(self, timeout: float = 30) -> BrokerProcess:
        args = [
            sys.executable,
            "-m",
            "broker",
            "standalone",
            "--set",
            f"dataDir={self.data_dir}",
            "--set",
            "brokerServicePort=0",
            "--set",
            "webServicePort=0",
            "--set",
            "bindAddress=127.0.0.1",
            "--set",
            "advertisedAddress=127.0.0.1",
        ]
        for setting in self.settings:
            args += ["--set", setting]
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        pattern = re.compile(rb"serving pulsar://[^:]+:(\d+) and http://[^:]+:(\d+)")
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[offset:]
            found = pattern.search(text)
            if found:
                self.port = int(found.group(1))
                self.web_port = int(found.group(2))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: {text[-2000:].decode(errors='replace')}")
            time.sleep(0.05)
        raise TimeoutError("broker process did not start")

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def restart(self) -> BrokerProcess:
        """Start again on the same data directory with the same ports chosen afresh."""
        return self.start()


def new_client(url: str, *, operation_timeout: int = 15, **options: Any) -> pulsar.Client:
    """The official client with quiet logging (errors only) and a bounded operation timeout."""
    return pulsar.Client(
        url,
        operation_timeout_seconds=operation_timeout,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        **options,
    )


def close_client(client: pulsar.Client) -> None:
    """Close a client that may own a fenced producer, or whose broker was just killed: C++ 4.2.0
    may then report AlreadyClosed for that producer's close, or NotConnected (it cannot send
    CLOSE_PRODUCER / CLOSE_CONSUMER on a dead connection); neither says anything about the
    broker under test."""
    with contextlib.suppress(pulsar.AlreadyClosed, pulsar.NotConnected):
        client.close()


def topic_stats(http: str, topic: str) -> dict[str, Any]:
    """``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats`` for a full topic name."""
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{http}/admin/v2/persistent/{path}/stats", timeout=10) as reply:
        stats: dict[str, Any] = json.loads(reply.read())
    return stats


def access_stats(http: str, topic: str) -> dict[str, Any]:
    """The PIP-68 ``producerAccess`` section of the topic stats."""
    access: dict[str, Any] = topic_stats(http, topic)["producerAccess"]
    return access


def read_all_messages(client: pulsar.Client, topic: str) -> list[pulsar.Message]:
    """Every message of ``topic`` from the earliest, with a reader."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out: list[pulsar.Message] = []
        while reader.has_message_available():
            out.append(reader.read_next(5000))
        return out
    finally:
        reader.close()


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    """The payloads of every message of ``topic`` from the earliest, with a reader."""
    return [message.data() for message in read_all_messages(client, topic)]


def wait_until(
    condition: Callable[[], bool],
    timeout: float = 10.0,
    failure: Callable[[], str] = lambda: "condition not reached in time",
) -> None:
    """Poll ``condition`` (every 20 ms) until it holds; fail after ``timeout`` seconds with
    ``failure()`` as the message."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(failure())
        time.sleep(0.02)


async def wait_until_async(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """``wait_until`` on a running event loop (the condition reads client or broker state)."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - no event signals these conditions
            await asyncio.sleep(0.02)


@contextlib.contextmanager
def env(**values: str) -> Any:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
