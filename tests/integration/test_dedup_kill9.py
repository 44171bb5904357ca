"""The kill -9 loop (R1): a deduplicating producer streams while the broker is SIGKILLed and
restarted again and again; afterwards every acknowledged id is in the topic exactly once, in
order, none missing. A control run with dedup disabled shows duplicates, proving the client's
retries really re-sent messages the broker had already stored.

The producer is the official client with a fixed name, explicit ids and ``send_timeout_millis=0``
(retry forever). The broker is a subprocess on a fixed port so the client reconnects to each new
incarnation. Kills are spread over the run by progress, not by time, so they all happen whatever
the machine's speed; each one is fired the moment the segment file's mtime moves, so it often
lands between a write and its receipts (the fdatasync takes longer than the watcher needs to
react; file timestamps being coarse, about every other kill hits). That is the window that makes
retries re-send stored messages; a kill at a time chosen by progress alone mostly misses it, and
then dedup is never put to the test.

Retention is infinite: each restart seals a segment, and dedup snapshots would otherwise let the
consumed segments be trimmed before the reader checks them (the dedup cursor counts as a
consumer, as in Pulsar).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerProcess, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow]

TOPIC = "persistent://public/default/kill-9-loop"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_a_segment_write(directory: Path, timeout: float = 5.0) -> None:
    """Spin until the newest segment file of ``directory`` is written to (its mtime moves)."""

    def newest() -> tuple[str, int]:
        segments = sorted(p for p in directory.glob("*.seg"))
        if not segments:
            return ("", 0)
        try:
            return (segments[-1].name, segments[-1].stat().st_mtime_ns)
        except FileNotFoundError:  # trimmed or renamed meanwhile
            return ("", 0)

    before = newest()
    deadline = time.monotonic() + timeout
    while newest() == before and time.monotonic() < deadline:
        pass


@dataclass
class Outcome:
    sent: int
    acked: set[int]
    stored: list[int]
    kills: int
    seconds: float
    errors: list[pulsar.Result] = field(default_factory=list)


def run_loop(data_dir: Path, *, dedup: bool, count: int, kills: int) -> Outcome:
    port = free_port()
    broker = BrokerProcess(
        data_dir,
        f"brokerServicePort={port}",
        f"brokerDeduplicationEnabled={'true' if dedup else 'false'}",
        "defaultRetentionTimeInMinutes=-1",
        "defaultRetentionSizeInMB=-1",
    ).start()
    url = f"pulsar://127.0.0.1:{port}"
    topic_directory = data_dir / "persistent" / "public" / "default" / TOPIC.rsplit("/", 1)[1]
    acked: set[int] = set()
    errors: list[pulsar.Result] = []
    lock = threading.Lock()
    started = time.monotonic()
    client = new_client(url, operation_timeout=30, io_threads=1)
    killed = 0
    try:
        producer = client.create_producer(
            TOPIC,
            producer_name="kill-9-producer",
            send_timeout_millis=0,
            block_if_queue_full=True,
            max_pending_messages=2000,
            batching_enabled=True,
            batching_max_messages=200,
            batching_max_publish_delay_ms=1,
        )

        def callback_for(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        acked.add(seq)
                    else:
                        errors.append(result)

            return done

        def send_all() -> None:
            # Ids from 1: the Python wrapper ignores a falsy sequence_id (0).
            for seq in range(1, count + 1):
                producer.send_async(f"{seq}".encode(), callback_for(seq), sequence_id=seq)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        for k in range(1, kills + 1):
            threshold = count * k // (kills + 1)
            deadline = time.monotonic() + 60
            while len(acked) < threshold and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(acked) >= threshold, f"stalled before kill {k} at {len(acked)} acks"
            wait_for_a_segment_write(topic_directory)
            broker.kill()
            killed += 1
            broker.start()
        sender.join(120)
        deadline = time.monotonic() + 120
        while len(acked) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sender.is_alive()
    finally:
        client.close()
    stored = read_all(url)
    broker.terminate()
    return Outcome(count, acked, stored, killed, time.monotonic() - started, errors)


def read_all(url: str) -> list[int]:
    client = new_client(url, operation_timeout=30, io_threads=1)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, receiver_queue_size=5000)
        out = []
        while reader.has_message_available():
            out.append(int(reader.read_next(10_000).data()))
        return out
    finally:
        client.close()


def test_kill_9_loop_keeps_every_acknowledged_id_exactly_once(tmp_path: Path) -> None:
    outcome = run_loop(tmp_path / "data", dedup=True, count=200_000, kills=6)
    assert outcome.kills >= 5
    assert outcome.errors == []
    assert len(outcome.acked) == outcome.sent  # send_timeout 0: every send ends acknowledged
    assert outcome.stored == list(range(1, outcome.sent + 1))  # once each, in order, no gap
    print(f"kill -9 loop: {outcome.sent} messages, {outcome.kills} kills, {outcome.seconds:.1f} s")


def test_control_without_dedup_shows_the_retries_duplicate(tmp_path: Path) -> None:
    # File timestamps are coarse (a few ms), so a kill lands in the write-to-receipt window only
    # about every other time; ten kills make a control without duplicates a one-in-a-thousand.
    outcome = run_loop(tmp_path / "data", dedup=False, count=80_000, kills=10)
    assert len(outcome.acked) == outcome.sent
    assert set(outcome.stored) == outcome.acked  # still no loss: acks follow the fsync
    duplicates = len(outcome.stored) - len(set(outcome.stored))
    assert duplicates > 0, "no retry re-sent a stored message: the kills did not bite"
    print(f"control: {duplicates} duplicates over {outcome.kills} kills, {outcome.seconds:.1f} s")
