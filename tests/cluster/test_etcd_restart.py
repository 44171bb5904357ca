"""etcd restarted under load. A short outage (shorter than the lease): the brokers keep serving
the topics they own, acknowledging all along. A long one (longer than the lease): they stop
acknowledging (they cannot know whether another broker took over), then, with etcd back,
register again and serve. Across both, every acknowledged message is stored once, in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar

from tests.cluster.conftest import (
    LEASE_TTL_MS,
    Cluster,
    free_port,
    read_ids,
    start_etcd,
    stop_process,
)
from tests.helpers import close_client, new_client, wait_until

TOPIC = "persistent://public/default/etcd-restart"


def test_brokers_ride_out_an_etcd_restart_and_register_again(tmp_path: Path) -> None:
    ports = (free_port(), free_port())
    etcd_dir, etcd_log = tmp_path / "etcd", tmp_path / "etcd.log"
    etcd = start_etcd(etcd_dir, etcd_log, *ports)
    cluster = Cluster(etcd, tmp_path / "data", "etcd-restart")
    acked: list[int] = []
    errors: list[pulsar.Result] = []
    stop = threading.Event()
    acking = threading.Event()  # set by every acknowledgement
    try:
        for _ in range(3):
            cluster.add_broker()
        client = new_client(cluster.service_url, operation_timeout=60, io_threads=1)
        try:
            producer = client.create_producer(
                TOPIC,
                producer_name="through-outages",
                send_timeout_millis=0,
                block_if_queue_full=True,
            )

            def callback_for(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
                def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                    if result == pulsar.Result.Ok:
                        acked.append(seq)
                        acking.set()
                    else:
                        errors.append(result)

                return done

            def send() -> None:
                seq = 0
                while not stop.is_set():
                    seq += 1
                    producer.send_async(f"{seq}".encode(), callback_for(seq), sequence_id=seq)
                    stop.wait(0.002)  # paced (~500/s) until told to stop

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            wait_until(lambda: len(acked) >= 200, 30)

            # Short outage: acknowledgements go on while etcd is down.
            stop_process(etcd.proc)
            during = len(acked)
            wait_until(lambda: len(acked) >= during + 100, LEASE_TTL_MS / 2000)
            etcd = start_etcd(etcd_dir, etcd_log, *ports)
            # Run on long enough (> 1 s, the refresh period TTL/3) for the leases to be renewed.
            back = len(acked)
            wait_until(lambda: len(acked) >= back + 600, 30)

            # Long outage: past the lease, acknowledgements stop; they resume after.
            time_down = time.monotonic()
            stop_process(etcd.proc)
            wait_until(lambda: stalled(acking), 2 * LEASE_TTL_MS / 1000)
            assert time.monotonic() - time_down < LEASE_TTL_MS / 1000 + 1
            etcd = start_etcd(etcd_dir, etcd_log, *ports)
            after = len(acked)
            wait_until(lambda: len(acked) >= after + 200, 60)
            stop.set()
            sender.join(10)
            producer.flush()
        finally:
            stop.set()
            close_client(client)
        assert errors == []
        assert read_ids(cluster.service_url, TOPIC) == list(range(1, len(acked) + 1))
        assert sorted(acked) == list(range(1, len(acked) + 1))
    finally:
        cluster.stop()
        stop_process(etcd.proc)


def stalled(acking: threading.Event, quiet: float = 0.5) -> bool:
    """No acknowledgement for ``quiet`` seconds (observed now): the event stays unset."""
    acking.clear()
    return not acking.wait(quiet)
