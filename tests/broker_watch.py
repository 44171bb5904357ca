"""What a stress test watches on an in-process broker while it is being abused.

* ``LoopWatch``: an exception handler installed on the broker's event loop (anything reaching it
  is an error nobody handled: a failed callback, a transport whose protocol raised, a task whose
  exception was never retrieved) plus a logging handler keeping every ERROR record and every
  record naming an unhandled error, from any logger of this process.
* ``HealthyPair``: an official-client producer and consumer on a topic of their own, publishing
  numbered messages and receiving them throughout; the test asserts they keep making progress
  and lose nothing.
* ``rss_bytes()`` / ``open_fds()``: this process's resident memory and descriptor count (the
  broker runs in-process, on its own thread).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar

from tests.helpers import BrokerThread, new_client

_UNHANDLED_MARKERS = (
    "Task exception was never retrieved",
    "Exception in callback",
    "Fatal error",
    "Unhandled",
    "Traceback",
)


def rss_bytes() -> int:
    """Resident set size of this process (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    """File descriptors open in this process (the broker's included: it runs in-process)."""
    return len(os.listdir("/proc/self/fd"))


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[str] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += " | " + repr(record.exc_info[1])
        if record.levelno >= logging.ERROR or any(m in text for m in _UNHANDLED_MARKERS):
            with self._lock_records:
                self.records.append(f"{record.levelname} {record.name}: {text}")


class LoopWatch:
    """Exception-handler calls on the broker loop and error logs anywhere in the process."""

    def __init__(self, broker: BrokerThread) -> None:
        self.handler_calls: list[str] = []
        self._capture = _Capture()
        self._broker = broker

    def __enter__(self) -> LoopWatch:
        async def install() -> None:
            asyncio.get_running_loop().set_exception_handler(self._on_exception)

        self._broker.call(install)
        logging.getLogger().addHandler(self._capture)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self._capture)

    def _on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        self.handler_calls.append(f"{context.get('message')}: {error!r}")
        loop.default_exception_handler(context)  # still logged, with its traceback

    @property
    def error_logs(self) -> list[str]:
        return list(self._capture.records)

    def problems(self) -> list[str]:
        """Everything seen so far that a healthy broker never produces."""
        return [f"exception handler: {c}" for c in self.handler_calls] + [
            f"log: {r}" for r in self.error_logs
        ]


class HealthyPair:
    """An official-client producer and consumer that must be served throughout a test."""

    def __init__(self, url: str) -> None:
        self.topic = f"persistent://public/default/healthy-{uuid.uuid4().hex[:8]}"
        self.client = new_client(url, operation_timeout=30)
        self.consumer = self.client.subscribe(
            self.topic,
            "healthy",
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        self.producer = self.client.create_producer(
            self.topic, producer_name=f"healthy-{uuid.uuid4().hex[:6]}", batching_enabled=False
        )
        self.acked: list[int] = []
        self.received: list[int] = []
        self.errors: list[str] = []
        self.longest_stall = 0.0
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, name="healthy-producer", daemon=True),
            threading.Thread(target=self._consume, name="healthy-consumer", daemon=True),
        ]

    def __enter__(self) -> HealthyPair:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_producing.set()
        self._stop_consuming.set()
        for thread in self._threads:
            thread.join(30)
        self.client.close()

    def _produce(self) -> None:
        number = 0
        last_ack = time.monotonic()
        while not self._stop_producing.is_set():
            number += 1
            try:
                self.producer.send(str(number).encode(), sequence_id=number)
            except Exception as exc:  # asserted on by the test
                self.errors.append(f"send {number}: {exc!r}")
                return
            now = time.monotonic()
            self.longest_stall = max(self.longest_stall, now - last_ack)
            last_ack = now
            self.acked.append(number)

    def _consume(self) -> None:
        while not self._stop_consuming.is_set():
            try:
                message = self.consumer.receive(200)
            except pulsar.Timeout:
                continue
            except Exception as exc:  # asserted on by the test
                self.errors.append(f"receive: {exc!r}")
                return
            self.received.append(int(message.data()))
            self.consumer.acknowledge(message)

    def progress(self) -> tuple[int, int]:
        return len(self.acked), len(self.received)

    def wait_for_progress(self, more: int = 20, timeout: float = 15.0) -> None:
        """Both sides move on by ``more`` messages within ``timeout`` seconds."""
        sent, got = self.progress()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now_sent, now_got = self.progress()
            if now_sent >= sent + more and now_got >= got + more:
                return
            if self.errors:
                break
            time.sleep(0.02)
        raise AssertionError(
            f"healthy pair stalled: acked {sent}->{len(self.acked)}, "
            f"received {got}->{len(self.received)}, errors {self.errors}"
        )

    def stop_and_check(self, timeout: float = 30.0) -> None:
        """Stop producing; every acknowledged message must arrive, each once and in order."""
        self._stop_producing.set()
        self._threads[0].join(30)
        acked = list(self.acked)
        deadline = time.monotonic() + timeout
        while len(self.received) < len(acked) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop_consuming.set()
        self._threads[1].join(30)
        assert not self.errors, self.errors
        assert acked, "the healthy producer never got a receipt"
        missing = sorted(set(acked) - set(self.received))
        assert not missing, f"healthy pair lost {len(missing)} messages, first {missing[:10]}"
        assert self.received == acked, "healthy consumer got duplicates or reordering"
