"""Failover: the owner of a topic's bundle is SIGKILLed while a PIP-6 producer sends.

The producer (official client, fixed name, explicit sequence ids, ``send_timeout_millis=0`` so
it retries forever) has every broker in its service URL. Each time, the owner is killed; another
broker takes the bundle when the lease expires, recovers the topic from the shared dataDir
(torn tail, dedup replay) and the producer's resends are deduplicated: every acknowledged id is
stored exactly once, in order. The takeover time (kill to the next acknowledgement) is
printed; then the killed broker is restarted on its former ports, so its address in the
client's list serves again.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pulsar
import pytest

from tests.cluster.conftest import (
    LEASE_TTL_MS,
    Cluster,
    http_lookup_owner,
    read_ids,
    restart_on_same_ports,
)
from tests.helpers import close_client, new_client, wait_until

TOPIC = "persistent://public/default/failover"


@dataclass
class Outcome:
    acked: set[int]
    stored: list[int]
    takeovers: list[float] = field(default_factory=list)  # kill to the next acknowledgement
    moves: list[float] = field(default_factory=list)  # kill to the bundle owned by another
    errors: list[pulsar.Result] = field(default_factory=list)


def owner_of(cluster: Cluster, topic: str) -> str:
    broker = cluster.alive()[0]
    return http_lookup_owner(broker.web_port, topic)  # the owner, or the one placed now


def run_kills(cluster: Cluster, *, count: int, kills: int, sigterm: bool = False) -> Outcome:
    url = cluster.service_url  # fixed: restarted brokers come back on the same ports
    client = new_client(url, operation_timeout=60, io_threads=1)
    outcome = Outcome(set(), [])
    lock = threading.Lock()
    stop = threading.Event()
    try:
        producer = client.create_producer(
            TOPIC,
            producer_name="failover-producer",
            send_timeout_millis=0,
            block_if_queue_full=True,
            max_pending_messages=500,
            batching_enabled=True,
            batching_max_messages=50,
            batching_max_publish_delay_ms=1,
        )

        def callback_for(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        outcome.acked.add(seq)
                    else:
                        outcome.errors.append(result)

            return done

        def send_all() -> None:
            for seq in range(1, count + 1):
                producer.send_async(f"{seq}".encode(), callback_for(seq), sequence_id=seq)
                if seq % 100 == 0 and stop.wait(0.05):  # paced (~2,000/s): kills land mid-stream
                    return  # the test failed and ended: stop sending

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        for k in range(1, kills + 1):
            threshold = count * k // (kills + 1)
            wait_for_acks(outcome, threshold, 90)
            victim = cluster.by_url(owner_of(cluster, TOPIC))
            assert sender.is_alive(), "the stream ended before the kill"
            killed_at = time.monotonic()
            if sigterm:
                assert victim.terminate() == 0  # drains: closes its topics, releases its bundles
            else:
                victim.kill()
            wait_for_new_owner(cluster, victim.url, 60)
            outcome.moves.append(time.monotonic() - killed_at)
            # Receipts the victim sent before dying may still arrive: count from here.
            wait_for_acks(outcome, len(outcome.acked) + 1, 60)
            outcome.takeovers.append(time.monotonic() - killed_at)
            restart_on_same_ports(victim)  # back in the client's list for the next rounds
        sender.join(120)
        wait_for_acks(outcome, count, 120)
        assert not sender.is_alive()
    finally:
        stop.set()
        close_client(client)
    outcome.stored = read_ids(url, TOPIC)
    return outcome


def wait_for_new_owner(cluster: Cluster, former: str, timeout: float) -> None:
    wait_until(
        lambda: owner_of(cluster, TOPIC) != former, timeout, lambda: "nobody took the bundle over"
    )


def wait_for_acks(outcome: Outcome, count: int, timeout: float) -> None:
    wait_until(
        lambda: len(outcome.acked) >= count,
        timeout,
        lambda: f"stalled at {len(outcome.acked)} acks (< {count})",
    )


def check(outcome: Outcome, count: int, kills: int, how: str = "SIGKILL") -> None:
    assert outcome.errors == []
    assert len(outcome.acked) == count  # send_timeout 0: every send ends acknowledged
    assert outcome.stored == list(range(1, count + 1))  # once each, in order, no gap
    assert len(outcome.takeovers) == kills
    print(
        f"owner {how} x{kills}: {count} messages; bundle moved after "
        f"median {statistics.median(outcome.moves):.2f} s, max {max(outcome.moves):.2f} s; "
        f"first ack after median {statistics.median(outcome.takeovers):.2f} s, "
        f"max {max(outcome.takeovers):.2f} s (lease TTL {LEASE_TTL_MS / 1000:.0f} s)"
    )


def test_owner_sigkill_during_dedup_produce_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    outcome = run_kills(cluster, count=12_000, kills=2)
    check(outcome, 12_000, 2)


def test_owner_sigterm_hands_its_bundles_over_without_waiting_for_the_lease(
    cluster: Cluster,
) -> None:
    outcome = run_kills(cluster, count=12_000, kills=2, sigterm=True)
    check(outcome, 12_000, 2, "SIGTERM")
    # Released on shutdown, so no lease has to expire first.
    assert max(outcome.moves) < LEASE_TTL_MS / 1000


@pytest.mark.slow
def test_owner_sigkill_ten_times_keeps_every_acknowledged_message_once(cluster: Cluster) -> None:
    outcome = run_kills(cluster, count=44_000, kills=10)
    check(outcome, 44_000, 10)
