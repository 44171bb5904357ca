"""PIP-68 leader election across broker failovers: three WaitForExclusive workers (the
``pip68_worker.py`` processes of tests/integration) on a three-broker cluster. Each round SIGKILLs
the broker owning the topic while the leader writes, waits for the writes to go on through the
new owner (the topic epoch, dedup state and the waiting queue survive the move), restarts the
broker, then SIGKILLs the leader so that the next candidate takes over.

The log must hold one contiguous run per leader with strictly growing epochs, every entry at the
index its leader expected (each leader rebuilt from the complete log, and no resend after a
failover was stored twice), and every acknowledged entry."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from itertools import groupby
from pathlib import Path

from tests.cluster.conftest import Cluster, http_lookup_owner, restart_on_same_ports
from tests.helpers import wait_until
from tests.integration.test_exclusive_leaders import WINDOW, Worker, read_entries

ENTRIES_PER_ROUND = 30


WORKER = Path(__file__).parents[1] / "integration" / "pip68_worker.py"


class ClusterWorker(Worker):
    """``Worker`` of tests/integration, running its ``pip68_worker.py`` against every broker
    (service URL and admin URLs)."""

    def __init__(self, worker_id: str, cluster: Cluster, topic: str) -> None:
        self.worker_id = worker_id
        admin_urls = ",".join(b.http for b in cluster.brokers)
        args = ["--service-url", cluster.service_url, "--admin-url", admin_urls]
        args += ["--topic", topic, "--worker-id", worker_id, "--window", str(WINDOW)]
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[list[str]] = []
        self.killed = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()


def live_leader(workers: list[Worker], timeout: float = 90.0) -> Worker:
    leaders: list[Worker] = []

    def one_leader() -> bool:
        leaders[:] = [
            w
            for w in workers
            if not w.killed and w.proc.poll() is None and w.is_leader and not w.event("FENCED")
        ]
        assert len(leaders) <= 1, "two live leaders at once"
        return bool(leaders)

    wait_until(one_leader, timeout, lambda: "no leader")
    return leaders[0]


def fenced(worker: Worker) -> bool:
    return worker.event("FENCED") is not None or worker.proc.poll() is not None


def leader_making_progress(workers: list[Worker], timeout: float = 90.0) -> Worker:
    """The leader that writes ENTRIES_PER_ROUND more entries after a failover. After a move,
    every producer reconnects: the former leader keeps the topic with its epoch, unless a
    waiting candidate's PRODUCER reaches the new owner first and takes it (a new epoch), which
    fences the former leader; then the candidate is the one that goes on."""
    deadline = time.monotonic() + timeout
    while True:
        candidate = live_leader(workers, deadline - time.monotonic())
        target = candidate.written + ENTRIES_PER_ROUND
        try:
            candidate.wait(lambda c=candidate, t=target: c.written >= t or fenced(c), 90)
        except AssertionError:
            if not fenced(candidate):
                raise
        if candidate.written >= target:
            return candidate


def test_leaders_across_broker_failovers_leave_contiguous_runs_per_epoch(
    cluster: Cluster,
) -> None:
    topic = f"persistent://public/default/leaders-{uuid.uuid4().hex[:8]}"
    first = cluster.brokers[0]
    http_lookup_owner(first.web_port, topic)  # place the bundle before the workers come
    workers: list[Worker] = [ClusterWorker(w, cluster, topic) for w in ("a", "b", "c")]
    led: list[Worker] = []
    failovers = 0
    try:
        while True:
            leader = live_leader(workers)
            if leader not in led:
                led.append(leader)
            target = leader.written + ENTRIES_PER_ROUND
            leader.wait(lambda lw=leader, t=target: lw.written >= t, 90)
            owner = cluster.by_url(http_lookup_owner(first.web_port, topic))
            owner.kill()
            if owner is first:
                first = next(b for b in cluster.alive())
            # Writes go on through the new owner (same leader, or a candidate that won).
            current = leader_making_progress(workers)
            failovers += 1
            if current not in led:
                led.append(current)
            restart_on_same_ports(owner)
            if not [w for w in workers if w is not current and not fenced(w) and not w.killed]:
                break
            current.kill()  # the next candidate takes over
    finally:
        for worker in workers:
            if not worker.killed:
                worker.kill()  # also reaps one that exited by itself (fenced), closing its pipe
    assert failovers >= 2

    entries = read_entries(cluster.service_url, topic)
    runs = [(worker, list(run)) for worker, run in groupby(entries, key=lambda e: e["worker"])]
    assert [worker for worker, _ in runs] == [w.worker_id for w in led]
    epochs = [w.epoch for w in led]
    assert epochs == sorted(set(epochs))  # strictly growing: no older leader after a newer
    for leader, (_, run) in zip(led, runs, strict=True):
        assert {e["epoch"] for e in run} == {leader.epoch}
        assert [e["seq"] for e in run] == list(range(len(run)))  # no gap, no duplicate
        assert leader.written <= len(run) <= leader.written + WINDOW
    assert [e["index"] for e in entries] == list(range(len(entries)))
