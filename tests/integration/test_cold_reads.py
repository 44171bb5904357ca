"""A consumer catching up on cold data never stalls the broker (issue #10, item 5).

After a restart every segment is sealed and nothing is cached (``managedLedgerCacheSizeMB=0``), so
each read goes to disk and the first read of each segment builds its index. ``DiskGate`` holds
every segment read (``pread``) and index build of the in-process broker until the test opens it.
While a catch-up read, a GET_LAST_MESSAGE_ID read and a seek by time are held there, another
producer keeps getting its receipts: the event loop is not the thread waiting. A broker that
read on the loop would not answer that producer until the gate opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.storage import segment
from broker.storage.segment import Segment
from tests.helpers import BrokerThread, broker_config, close_client, new_client, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]

COLD = "persistent://public/default/cold-catch-up"
LIVE = "persistent://public/default/live"
MESSAGES = 500


class DiskGate:
    """Once ``close``d, makes the storage's disk reads wait until ``release``; records who
    waited."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self.waiting = 0
        self.threads: set[str] = set()

    def wrap(self, read: Callable[..., Any]) -> Callable[..., Any]:
        def gated(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.waiting += 1
                self.threads.add(threading.current_thread().name)
            try:
                if not self._open.wait(30):
                    raise TimeoutError("the test never opened the disk gate")
            finally:
                with self._lock:
                    self.waiting -= 1
            return read(*args, **kwargs)

        return gated

    def close(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()


@pytest.fixture
def cold_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A broker restarted on a topic of ``MESSAGES`` entries in sealed segments, cache off."""
    config = broker_config(
        tmp_path / "data",
        managed_ledger_cache_size_mb=0,
        managed_ledger_max_entries_per_ledger=100,
        broker_deduplication_enabled=False,
    )
    first = BrokerThread(config).start()
    try:
        client = new_client(first.url)
        producer = client.create_producer(COLD, batching_enabled=False)
        for index in range(MESSAGES):
            producer.send_async(f"m{index}".encode(), None)
        producer.flush()
        client.close()
    finally:
        first.stop()
    restarted = BrokerThread(config).start()
    try:
        yield restarted
    finally:
        restarted.stop()


def test_a_consumer_catches_up_on_cold_data_while_other_clients_are_served(
    cold_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = DiskGate()
    monkeypatch.setattr(segment, "pread_exact", gate.wrap(segment.pread_exact))
    monkeypatch.setattr(Segment, "_load_index", gate.wrap(Segment._load_index))
    client = new_client(cold_broker.url, operation_timeout=10)
    try:
        # At the end of the topic: nothing to read until it seeks back (by time, below).
        rewinding = client.subscribe(COLD, "rewind", initial_position=pulsar.InitialPosition.Latest)
        gate.close()
        consumer = client.subscribe(
            COLD, "catch-up", initial_position=pulsar.InitialPosition.Earliest
        )
        wait_until(lambda: gate.waiting == 1)  # the first catch-up read waits at the gate
        last_id: list[pulsar.MessageId] = []
        asking = threading.Thread(target=lambda: last_id.append(consumer.get_last_message_id()))
        asking.start()
        wait_until(lambda: gate.waiting == 2)  # GET_LAST_MESSAGE_ID reads the last entry
        seeking = threading.Thread(target=lambda: rewinding.seek(0))
        seeking.start()
        wait_until(lambda: gate.waiting == 3)  # seek by time searches the entries

        live = client.create_producer(LIVE, batching_enabled=False)
        receipts = [live.send(f"live-{i}".encode()) for i in range(20)]
        assert len(receipts) == 20  # every send got its receipt while the reads waited
        assert gate.waiting == 3

        gate.release()
        received = []
        for _ in range(MESSAGES):
            message = consumer.receive(10_000)
            received.append(message.data().decode())
            consumer.acknowledge(message)
        assert received == [f"m{i}" for i in range(MESSAGES)]
        asking.join(10)
        assert last_id == [message.message_id()]
        seeking.join(10)
        assert rewinding.receive(10_000).data() == b"m0"  # published after time 0: all
        assert all(name.startswith("magnetar-disk") for name in gate.threads), gate.threads
    finally:
        gate.release()
        close_client(client)
