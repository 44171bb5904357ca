"""Group commit triggers: journalMaxGroupWaitMSec and journalMaxGroupSizeBytes (BookKeeper's
rules: a group is written when the wait has passed or enough bytes are staged, whichever first).

The wait is set long (1.5 s) so the two triggers are told apart by the receipt times."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerThread, broker_config, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]

WAIT_MS = 1500
GROUP_BYTES = 4096


@pytest.fixture
def producer(tmp_path: Path) -> Iterator[pulsar.Producer]:
    config = broker_config(
        tmp_path / "data",
        journal_max_group_wait_msec=float(WAIT_MS),
        journal_max_group_size_bytes=GROUP_BYTES,
    )
    broker = BrokerThread(config).start()
    client = new_client(broker.url)
    try:
        topic = f"persistent://public/default/group-{uuid.uuid4().hex[:10]}"
        yield client.create_producer(topic, batching_enabled=False)
    finally:
        close_client(client)
        broker.stop()


def timed_send(producer: pulsar.Producer, payload: bytes) -> float:
    started = time.monotonic()
    producer.send(payload)
    return time.monotonic() - started


def test_a_small_entry_waits_for_the_group_wait(producer: pulsar.Producer) -> None:
    assert timed_send(producer, b"x") >= WAIT_MS / 1000 * 0.9


def test_an_entry_of_the_group_size_is_written_at_once(producer: pulsar.Producer) -> None:
    assert timed_send(producer, b"x" * GROUP_BYTES) < WAIT_MS / 1000 / 2


def test_small_entries_adding_up_to_the_group_size_start_the_commit(
    producer: pulsar.Producer,
) -> None:
    """Eight pipelined 1000-byte SENDs: the fifth crosses 4096 staged bytes, so the first
    receipt comes long before the wait would have expired."""
    first_receipt = threading.Event()
    started = time.monotonic()
    for _ in range(8):
        producer.send_async(b"y" * 1000, lambda _result, _id: first_receipt.set())
    assert first_receipt.wait(10)
    assert time.monotonic() - started < WAIT_MS / 1000 / 2
    producer.flush()
