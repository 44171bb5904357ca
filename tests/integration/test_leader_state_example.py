"""The PIP-68 leader-state example (``examples/leader_state.py``) as a test: three candidate
processes, the leader SIGKILLed in turn, the topic compacted between leaders.

What must hold, read back from the whole log afterwards:

* no two epochs interleave: the log is the first leader's writes, then the second's, ...;
* every leader started from the complete state of its predecessors: each update's counter is
  the previous counter of its key in the log plus one (1 after a deletion or for a new key), so a
  leader that missed any confirmed write of an earlier one would break the chain;
* what each leader announced at its election (keys, counter sum) is the state the log holds
  before its first write.
"""

from __future__ import annotations

import functools
import json
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pulsar
import pytest

from tests.helpers import BrokerThread, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOPIC = "persistent://public/default/leader-state-test"


class Candidate:
    def __init__(self, broker: BrokerThread, name: str) -> None:
        self.name = name
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "examples" / "leader_state.py"),
                "--service-url",
                broker.url,
                "--admin-url",
                broker.http,
                "--topic",
                TOPIC,
                "--name",
                name,
                "--keys",
                "5",
                "--delete-every",
                "7",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()
        self.leader: tuple[int, int, int] | None = None
        self.wrote = 0

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.strip())

    def drain(self) -> None:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            words = line.split()
            if words[0] == "LEADER":
                self.leader = (int(words[1]), int(words[2]), int(words[3]))
            elif words[0] == "WROTE":
                self.wrote += 1

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def has_written(candidate: Candidate, count: int) -> bool:
    candidate.drain()
    return candidate.wrote >= count


def compact(broker: BrokerThread) -> None:
    url = f"{broker.http}/admin/v2/persistent/{TOPIC.removeprefix('persistent://')}/compaction"
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10):
        pass

    def done() -> bool:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return bool(json.loads(reply.read())["status"] == "SUCCESS")

    wait_for(done, "compaction")


def read_log(broker: BrokerThread) -> list[tuple[str, bytes]]:
    client = new_client(broker.url)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            message = reader.read_next(5000)
            out.append((message.partition_key(), message.data()))
        reader.close()
        return out
    finally:
        close_client(client)


def test_leaders_killed_in_turn_each_start_from_the_complete_state(broker: BrokerThread) -> None:
    candidates = [Candidate(broker, f"candidate-{i}") for i in range(3)]
    leaders: list[Candidate] = []
    try:
        for turn in range(3):

            def elected() -> bool:
                for c in candidates:
                    c.drain()
                return any(c.leader is not None and c not in leaders for c in candidates)

            wait_for(elected, f"leader {turn + 1}")
            current = next(c for c in candidates if c.leader is not None and c not in leaders)
            assert sum(1 for c in candidates if c.leader is not None and c not in leaders) == 1
            leaders.append(current)
            wait_for(functools.partial(has_written, current, 25), "writes")
            if turn < 2:
                current.kill()  # SIGKILL, mid-stream
                compact(broker)
            else:
                current.kill()
    finally:
        for c in candidates:
            c.kill()
            assert c.proc.stdout is not None
            c.proc.stdout.close()

    log = read_log(broker)
    # The chain: each counter is its key's previous counter + 1; an empty value deletes.
    counters: dict[str, int] = {}
    order: list[str] = []
    states_before: dict[str, tuple[int, int]] = {}
    for key, data in log:
        if not data:
            counters.pop(key, None)
            continue
        value = json.loads(data)
        leader = value["leader"]
        if not order or order[-1] != leader:
            assert leader not in order, f"{leader} writes again after another leader: interleaved"
            order.append(leader)
            states_before[leader] = (len(counters), sum(counters.values()))
        assert value["counter"] == counters.get(key, 0) + 1, (key, value, counters)
        counters[key] = value["counter"]
    assert order == [c.name for c in leaders]
    for c in leaders:
        assert c.leader is not None
        _epoch, keys, total = c.leader
        assert (keys, total) == states_before[c.name]
    epochs = [c.leader[0] for c in leaders if c.leader is not None]
    assert epochs == sorted(epochs)
    assert len(set(epochs)) == 3
    assert len(log) >= 75  # 25 confirmed writes per leader at least
