"""The replay guard against a real broker: the earlier attempt's last row is found and compared."""

from __future__ import annotations

import pytest

from client.sync import Client
from spark_connector.replay_guard import ReplayGuard, ReplayMismatch, find_stored
from spark_connector.rows import SinkRow
from tests.helpers import BrokerThread

TOPIC = "persistent://public/default/guarded"
BATCH = 1


def row(i: int) -> SinkRow:
    return SinkRow(f"row-{i}".encode(), f"k{i}", None, None, 1000 + i, {"i": str(i)})


def seq(i: int) -> int:
    return (BATCH << 32) | i


@pytest.fixture
def client(broker: BrokerThread) -> Client:
    client = Client(broker.url)
    ours = client.create_producer(TOPIC, producer_name="task-0", batching_max_messages=2)
    for i in range(6):  # an earlier attempt stored rows 0..5, in batches of 2
        r = row(i)
        ours.send_async(
            r.value,
            None,
            properties=r.properties,
            partition_key=r.key,
            event_timestamp=r.event_time,
            sequence_id=seq(i),
        )
    ours.flush()
    ours.close()
    # Other tasks kept writing: the row sits 600 entries before the end (windows double back).
    others = client.create_producer(TOPIC, producer_name="task-1", batching_enabled=False)
    for i in range(600):
        others.send(b"other", sequence_id=seq(i))
    others.close()
    return client


def test_find_stored_reads_the_producers_last_message(client: Client) -> None:
    try:
        found = find_stored(client, TOPIC, "task-0", seq(5), 10_000)
        assert found is not None
        assert (found.data(), found.producer_name(), found.sequence_id()) == (
            b"row-5",
            "task-0",
            seq(5),
        )
        assert find_stored(client, TOPIC, "task-0", seq(9), 300) is None  # retried 300 ms
        # The producer's message is the topic's very last (test_reorder_retry has it as the
        # second message of a batch entry, which the search reads to the end).
        tail = client.create_producer(
            TOPIC,
            producer_name="task-2",
            batching_max_messages=2,
            batching_max_publish_delay_ms=3_600_000,
        )
        for i in range(4):
            tail.send_async(f"tail-{i}".encode(), None, sequence_id=seq(i))
        tail.flush()
        tail.close()
        found = find_stored(client, TOPIC, "task-2", seq(3), 10_000)
        assert found is not None
        assert found.data() == b"tail-3"
    finally:
        client.close()


def test_the_same_rows_pass_and_other_rows_fail(client: Client) -> None:
    try:
        guard = ReplayGuard(client, BATCH, "task-0", 10_000)
        guard.producer_ready(TOPIC, seq(5), 0, row(0))
        for i in range(1, 8):
            guard.check(i, TOPIC, row(i))
        guard.finish(8)

        shifted = ReplayGuard(client, BATCH, "task-0", 10_000)  # a row went missing upstream
        shifted.producer_ready(TOPIC, seq(5), 0, row(1))
        for i in range(1, 5):
            shifted.check(i, TOPIC, row(i + 1))  # rows before 5 are not compared
        with pytest.raises(ReplayMismatch, match=r"stored row 5 .* has another row there"):
            shifted.check(5, TOPIC, row(6))

        shorter = ReplayGuard(client, BATCH, "task-0", 10_000)
        shorter.producer_ready(TOPIC, seq(5), 0, row(0))
        with pytest.raises(ReplayMismatch, match="has only 4 rows"):
            shorter.finish(4)

        moved = ReplayGuard(client, BATCH, "task-0", 10_000)  # row 5 now goes elsewhere
        moved.producer_ready(TOPIC, seq(5), 0, row(0))
        with pytest.raises(ReplayMismatch, match="sends it to persistent://public/default/x"):
            moved.check(5, "persistent://public/default/x", row(5))
        with pytest.raises(ReplayMismatch, match="to another topic or partition"):
            ReplayGuard(client, BATCH, "task-0", 10_000).producer_ready(TOPIC, seq(5), 6, row(6))

        # Another batch's ids (or none): a first attempt, nothing to compare.
        ReplayGuard(client, BATCH + 1, "task-0", 10_000).producer_ready(TOPIC, seq(5), 0, row(9))
        ReplayGuard(client, BATCH, "task-0", 10_000).producer_ready(TOPIC, -1, 0, row(9))
    finally:
        client.close()
