"""The PIP-68 leader example end to end: three processes compete with WaitForExclusive.

Each worker (``pip68_worker.py``, a separate process with its own official client) waits for the
topic; the leader rebuilds its state by reading the topic, then appends entries (pipelined, up to
``WINDOW`` in flight) tagged with its worker id, its topic epoch, its own sequence and the log
index it expects each entry to get. The test SIGKILLs each leader after it has written a few
dozen entries; the broker sees the connection drop and promotes the next candidate in FIFO order.

The topic must then hold one contiguous run per leader, in the order they led, with the epoch
growing from run to run: never an entry of an older leader after a newer one. Every entry's
expected index equals its real one, so each leader rebuilt its state from the complete log (the
broker grants the topic only once its predecessor's writes are durable); and each run holds every
entry its leader reported as written, plus at most the sends in flight when it was killed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from itertools import groupby
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.compat]

WORKER = Path(__file__).with_name("pip68_worker.py")
ENTRIES_PER_LEADER = 40
WINDOW = 20  # sends a leader keeps in flight


class Worker:
    """A ``pip68_worker.py`` process and the events it printed."""

    def __init__(self, worker_id: str, broker: BrokerThread, topic: str) -> None:
        self.worker_id = worker_id
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                "--service-url",
                broker.url,
                "--admin-url",
                broker.http,
                "--topic",
                topic,
                "--worker-id",
                worker_id,
                "--window",
                str(WINDOW),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[list[str]] = []
        self.killed = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut short by SIGKILL
            with self._changed:
                self.lines.append(line.split())
                self._changed.notify_all()

    def event(self, kind: str) -> list[str] | None:
        with self._changed:
            found = [words for words in self.lines if words and words[0] == kind]
        return found[-1] if found else None

    @property
    def is_leader(self) -> bool:
        return self.event("LEADER") is not None

    @property
    def epoch(self) -> int:
        leader = self.event("LEADER")
        assert leader is not None
        return int(leader[1])

    @property
    def written(self) -> int:
        """How many entries the worker reported as written (acknowledged)."""
        wrote = self.event("WROTE")
        return 0 if wrote is None else int(wrote[1]) + 1

    def wait(self, condition: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"worker {self.worker_id}: {self.lines[-5:]}")
                self._changed.wait(min(remaining, 0.1))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.killed = True


def wait_for_leader(workers: list[Worker], timeout: float = 60.0) -> Worker:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leaders = [w for w in workers if not w.killed and w.is_leader]
        assert len(leaders) <= 1, "two live leaders at once"
        if leaders:
            return leaders[0]
        time.sleep(0.02)
    raise AssertionError("no leader was promoted")


def read_entries(url: str, topic: str) -> list[dict[str, Any]]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        entries: list[dict[str, Any]] = []
        while reader.has_message_available():
            entries.append(json.loads(reader.read_next(5000).data()))
        return entries
    finally:
        client.close()


def test_leaders_killed_one_after_another_leave_contiguous_runs(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/leaders-{uuid.uuid4().hex[:10]}"
    workers = [Worker(worker_id, broker, topic) for worker_id in ("a", "b", "c")]
    try:
        led: list[Worker] = []
        for _ in workers:
            leader = wait_for_leader(workers)
            leader.wait(lambda lw=leader: lw.written >= ENTRIES_PER_LEADER)
            leader.kill()
            led.append(leader)
    finally:
        for worker in workers:
            if worker.proc.poll() is None:
                worker.kill()

    entries = read_entries(broker.url, topic)
    runs = [(worker, list(run)) for worker, run in groupby(entries, key=lambda e: e["worker"])]
    # One contiguous run per leader, in the order they led: never an older leader after a newer.
    assert [worker for worker, _ in runs] == [w.worker_id for w in led]
    assert [w.epoch for w in led] == [0, 1, 2]
    for leader, (_, run) in zip(led, runs, strict=True):
        assert {e["epoch"] for e in run} == {leader.epoch}
        assert [e["seq"] for e in run] == list(range(len(run)))
        # Everything it was told was stored is stored, plus at most the sends in flight.
        assert leader.written <= len(run) <= leader.written + WINDOW
    # Each leader started from the complete log its predecessors left.
    assert [e["index"] for e in entries] == list(range(len(entries)))
