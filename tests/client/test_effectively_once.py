"""Issue #11 Deliver 2: our producer with ``send_timeout_millis=0`` stores every message exactly
once, in order, while the broker is SIGKILLed and restarted again and again; with dedup off the
same run stores duplicates (the control that proves the kills made the producer resend).

The broker is a subprocess on a fixed port, so the producer reconnects to each new incarnation
on its own (lookup, re-create with the same name, resend every pending frame). Kills are spread
by progress and each is fired the moment the topic's segment file is written to, so it often
lands between a write and its receipts: the window where a resend meets a stored copy. The
topic is read back with the official reader.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from client import Client, MessageId, Result
from tests.helpers import BrokerProcess, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow]

TOPIC = "persistent://public/default/effectively-once"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_a_segment_write(directory: Path, timeout: float = 5.0) -> None:
    """Spin until the newest segment file of ``directory`` is written to (its mtime moves)."""

    def newest() -> tuple[str, int]:
        try:
            segments = sorted(directory.glob("*.seg"))
            return (segments[-1].name, segments[-1].stat().st_mtime_ns) if segments else ("", 0)
        except (FileNotFoundError, IndexError):
            return ("", 0)

    before = newest()
    deadline = time.monotonic() + timeout
    while newest() == before and time.monotonic() < deadline:
        pass


@dataclass
class Outcome:
    sent: int
    acked: dict[int, MessageId]
    stored: list[int]
    kills: int
    seconds: float
    errors: list[Result] = field(default_factory=list)

    @property
    def duplicate_receipts(self) -> int:
        return sum(1 for message_id in self.acked.values() if message_id.entry_id() == -1)


def run_loop(
    data_dir: Path, *, dedup: bool, count: int, kills: int, batching: bool = False
) -> Outcome:
    port = free_port()
    broker = BrokerProcess(
        data_dir,
        f"brokerServicePort={port}",
        f"brokerDeduplicationEnabled={'true' if dedup else 'false'}",
        "defaultRetentionTimeInMinutes=-1",
        "defaultRetentionSizeInMB=-1",
    ).start()
    url = f"pulsar://127.0.0.1:{port}"
    segments = data_dir / "persistent" / "public" / "default" / TOPIC.rsplit("/", 1)[1]
    acked: dict[int, MessageId] = {}
    errors: list[Result] = []
    lock = threading.Lock()
    started = time.monotonic()
    killed = 0
    try:
        with Client(url, operation_timeout_seconds=30, max_backoff_interval_ms=500) as client:
            producer = client.create_producer(
                TOPIC,
                producer_name="effectively-once",
                send_timeout_millis=0,
                block_if_queue_full=True,
                max_pending_messages=1000,
                batching_enabled=batching,
                batching_max_messages=100,
                batching_max_publish_delay_ms=1,
            )

            def done_for(seq: int):  # type: ignore[no-untyped-def]
                def done(result: Result, message_id: MessageId | None) -> None:
                    with lock:
                        if result is Result.Ok and message_id is not None:
                            acked[seq] = message_id
                        else:
                            errors.append(result)

                return done

            def send_all() -> None:
                for seq in range(1, count + 1):
                    producer.send_async(str(seq).encode(), done_for(seq), sequence_id=seq)

            sender = threading.Thread(target=send_all, daemon=True)
            sender.start()
            for k in range(1, kills + 1):
                threshold = count * k // (kills + 1)
                deadline = time.monotonic() + 60
                while len(acked) < threshold and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert len(acked) >= threshold, f"stalled before kill {k} at {len(acked)} acks"
                wait_for_a_segment_write(segments)
                broker.kill()
                killed += 1
                broker.start()
            sender.join(120)
            assert not sender.is_alive()
            producer.flush()
        stored = read_all(url)
    finally:
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
        close_client(client)


def test_every_message_is_stored_exactly_once_in_order_across_kills(tmp_path: Path) -> None:
    outcome = run_loop(tmp_path / "data", dedup=True, count=50_000, kills=10)
    assert outcome.kills == 10
    assert outcome.errors == []
    assert len(outcome.acked) == outcome.sent  # send_timeout 0: every send ends acknowledged
    assert outcome.stored == list(range(1, outcome.sent + 1))  # once each, in order, no gap
    print(
        f"effectively-once: {outcome.sent} messages, {outcome.kills} kills, "
        f"{outcome.duplicate_receipts} resends answered -1:-1, {outcome.seconds:.1f} s"
    )


def test_batches_too_are_stored_exactly_once_in_order_across_kills(tmp_path: Path) -> None:
    outcome = run_loop(tmp_path / "data", dedup=True, count=20_000, kills=5, batching=True)
    assert outcome.kills == 5
    assert outcome.errors == []
    assert len(outcome.acked) == outcome.sent
    assert outcome.stored == list(range(1, outcome.sent + 1))
    assert {message_id.batch_size() for message_id in outcome.acked.values()} - {0} != set()
    print(
        f"effectively-once, batched: {outcome.sent} messages, {outcome.kills} kills, "
        f"{outcome.duplicate_receipts} resends answered -1:-1, {outcome.seconds:.1f} s"
    )


def test_control_without_dedup_the_same_resends_store_duplicates(tmp_path: Path) -> None:
    outcome = run_loop(tmp_path / "data", dedup=False, count=20_000, kills=8)
    assert outcome.errors == []
    assert len(outcome.acked) == outcome.sent
    assert set(outcome.stored) == set(outcome.acked)  # still nothing lost
    duplicates = len(outcome.stored) - len(set(outcome.stored))
    assert duplicates > 0, "no resend met a stored copy: the kills did not bite"
    print(f"control: {duplicates} duplicates over {outcome.kills} kills, {outcome.seconds:.1f} s")
