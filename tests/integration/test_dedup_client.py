"""PIP-6 deduplication end to end with the official client (C++ core 4.2.0).

Pulsar's ClientDeduplicationTest scenarios C1-C5 (fixed producer name, explicit sequence ids,
batching on and off, across clean and kill -9 restarts), TopicDuplicationTest T2/T3 through the
REST paths (topic > namespace > broker, persisted across a restart), the dedup section of the
topic stats, and the R8 decision (a C++ batch straddling the persisted mark is stored whole).
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.helpers import (
    BrokerProcess,
    BrokerThread,
    broker_config,
    close_client,
    new_client,
    read_all,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]

NAME = "my-producer-name"


def new_topic() -> str:
    return f"persistent://public/default/dedup-{uuid.uuid4().hex[:10]}"


def producer_of(client: pulsar.Client, topic: str, *, batching: bool) -> pulsar.Producer:
    return client.create_producer(
        topic,
        producer_name=NAME,
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
        send_timeout_millis=0,
    )


def send_all(producer: pulsar.Producer, seqs: list[int], prefix: str = "m") -> list[Any]:
    """Send async (so a batching producer may batch them), wait, return the message ids."""
    results: list[Any] = [None] * len(seqs)
    called: list[int] = []
    all_called = threading.Event()

    def done(index: int) -> Any:
        def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            results[index] = msg_id if result == pulsar.Result.Ok else result
            called.append(index)
            if len(called) == len(seqs):
                all_called.set()

        return callback

    for index, seq in enumerate(seqs):
        producer.send_async(f"{prefix}-{seq}".encode(), done(index), sequence_id=seq)
    producer.flush()
    # flush() can return before the last callbacks have run: the official client calls them
    # on its own thread (a fresh-clone run saw a result still None right after flush).
    assert all_called.wait(30), f"callbacks of {sorted(called)} only"
    return results


def http(broker_http: str, method: str, path: str, body: str | None = None) -> Any:
    request = urllib.request.Request(
        broker_http + path,
        data=None if body is None else body.encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
        return json.loads(text) if text else None


def topic_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def dedup_stats(broker_http: str, topic: str) -> dict[str, Any]:
    stats: dict[str, Any] = http(broker_http, "GET", topic_path(topic) + "/stats")
    return dict(stats["deduplication"])


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = new_client(broker.url)
    try:
        yield c
    finally:
        c.close()


def restart(broker: BrokerThread) -> BrokerThread:
    """A clean restart (SIGTERM-like drain) on the same data directory."""
    broker.stop()
    return BrokerThread(broker.config).start()


# --------------------------------------------------------------------------- C1-C3


@pytest.mark.parametrize("batching", [False, True])
def test_c1_sequence_resumes_after_reconnect(client: pulsar.Client, batching: bool) -> None:
    topic = new_topic()
    producer = producer_of(client, topic, batching=batching)
    assert producer.last_sequence_id() == -1
    for i in range(10):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    producer.close()

    producer = producer_of(client, topic, batching=batching)
    # With batching the C++ client sends one batch "seq 0, 10 messages"; the broker counts the
    # batch as 0..9 (Java would say 0 and the next 9 messages would be dropped).
    assert producer.last_sequence_id() == 9
    for i in range(10, 20):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    assert read_all(client, topic) == [f"m-{i}".encode() for i in range(20)]


@pytest.mark.parametrize("batching", [False, True])
def test_c2_sequence_survives_a_clean_restart(tmp_path: Path, batching: bool) -> None:
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(broker.url)
    try:
        producer = producer_of(client, topic, batching=batching)
        send_all(producer, list(range(10)))
        client.close()
        broker = restart(broker)
        client = new_client(broker.url)
        producer = producer_of(client, topic, batching=batching)
        assert producer.last_sequence_id() == 9
        send_all(producer, list(range(5, 10)))  # duplicates
        send_all(producer, list(range(10, 15)))
        assert read_all(client, topic) == [f"m-{i}".encode() for i in range(15)]
    finally:
        client.close()
        broker.stop()


@pytest.mark.slow
@pytest.mark.parametrize("batching", [False, True])
def test_c2_sequence_survives_kill_9(tmp_path: Path, batching: bool) -> None:
    """No snapshot was taken (fewer than brokerDeduplicationEntriesInterval entries and the
    broker killed before its periodic task): the marks come back by replaying the log."""
    topic = new_topic()
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        client = new_client(broker.url)
        producer = producer_of(client, topic, batching=batching)
        send_all(producer, list(range(10)))
        broker.kill()
        close_client(client)  # its broker is dead: what this test checks comes after
        broker.start()
        client = new_client(broker.url)
        producer = producer_of(client, topic, batching=batching)
        assert producer.last_sequence_id() == 9
        send_all(producer, list(range(8, 10)))  # duplicates
        send_all(producer, list(range(10, 12)))
        assert read_all(client, topic) == [f"m-{i}".encode() for i in range(12)]
        client.close()
    finally:
        broker.kill()


@pytest.mark.parametrize("batching", [False, True])
def test_c3_explicit_ids_resent_are_dropped_also_after_restart(
    tmp_path: Path, batching: bool
) -> None:
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(broker.url)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = producer_of(client, topic, batching=batching)
        # (The Python wrapper ignores sequence_id=0 as falsy; the automatic id is 0 anyway.)
        for seq in range(3):
            producer.send(f"m-{seq}".encode(), sequence_id=seq)
        for seq in (1, 2):
            duplicate = producer.send(f"m-{seq}".encode(), sequence_id=seq)
            assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
        received = [consumer.receive(5000) for _ in range(3)]
        assert [m.data() for m in received] == [b"m-0", b"m-1", b"m-2"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        consumer.acknowledge_cumulative(received[-1])
        consumer.close()
        client.close()

        broker = restart(broker)
        client = new_client(broker.url)
        consumer = client.subscribe(topic, "sub")
        producer = producer_of(client, topic, batching=batching)
        assert producer.last_sequence_id() == 2
        send_all(producer, [1, 2])
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        # One verdict per entry: the two resends may travel as one batch.
        assert dedup_stats(broker.http, topic)["duplicatesDropped"] in (1, 2)
    finally:
        client.close()
        broker.stop()


# --------------------------------------------------------------------------- C4, C5, R8


def test_c4_high_water_mark_with_batching(tmp_path: Path) -> None:
    """Seqs 2, 3, 5 then 2, 4, 6 -> 2, 3, 5, 6: 4 is dropped although never seen (it is below
    the mark). Each message is sent on its own (the Java client isolates a possible duplicate
    in a batch of its own; the C++ client does not, see the next test)."""
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(broker.url)
    try:
        producer = producer_of(client, topic, batching=True)
        for seq in (2, 3, 5, 2, 4, 6):
            producer.send(f"m-{seq}".encode(), sequence_id=seq)
        assert read_all(client, topic) == [b"m-2", b"m-3", b"m-5", b"m-6"]
        client.close()
        broker = restart(broker)
        client = new_client(broker.url)
        producer = producer_of(client, topic, batching=True)
        assert producer.last_sequence_id() == 6
        send_all(producer, [2, 4])
        assert read_all(client, topic) == [b"m-2", b"m-3", b"m-5", b"m-6"]
    finally:
        client.close()
        broker.stop()


def test_c5_non_batched_async(tmp_path: Path) -> None:
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(broker.url)
    try:
        producer = producer_of(client, topic, batching=False)
        send_all(producer, [2, 3, 5])
        ids = send_all(producer, [2, 4])
        assert [(i.ledger_id(), i.entry_id()) for i in ids] == [(-1, -1), (-1, -1)]
        assert read_all(client, topic) == [b"m-2", b"m-3", b"m-5"]
        client.close()
        broker = restart(broker)
        client = new_client(broker.url)
        producer = producer_of(client, topic, batching=False)
        assert producer.last_sequence_id() == 5
        send_all(producer, [2, 4])
        assert read_all(client, topic) == [b"m-2", b"m-3", b"m-5"]
    finally:
        client.close()
        broker.stop()


def test_r8_cpp_batch_straddling_the_mark_is_stored_whole(broker: BrokerThread) -> None:
    """The C++ client batches 2, 4, 6 (sent async after 2, 3, 5 were stored) into one entry
    carrying only the first id. Java's broker would acknowledge it as a duplicate and lose 6
    (Pulsar #6273). Magnetar reads the per-message ids, sees the batch reaches 6, and stores it
    whole: 2 and 4 come twice, 6 is not lost (see broker/publish/dedup.py)."""
    topic = new_topic()
    client = new_client(broker.url)
    try:
        producer = producer_of(client, topic, batching=True)
        send_all(producer, [2, 3, 5])
        send_all(producer, [2, 4, 6])
        stored = read_all(client, topic)
        assert b"m-6" in stored
        assert stored == [b"m-2", b"m-3", b"m-5", b"m-2", b"m-4", b"m-6"]
        assert dedup_stats(broker.http, topic)["straddlingBatchesStored"] == 1
    finally:
        client.close()


# --------------------------------------------------------------------------- enable / disable


def test_t2_t3_rest_policies_topic_over_namespace_over_broker(tmp_path: Path) -> None:
    topic = new_topic()
    ns_path = "/admin/v2/namespaces/public/default/deduplication"
    topic_flag = topic_path(topic) + "/deduplicationEnabled"
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(broker.url)
    try:
        producer = producer_of(client, topic, batching=False)
        send_all(producer, [0, 1, 2])
        assert http(broker.http, "GET", ns_path) is None
        assert dedup_stats(broker.http, topic)["enabled"] is True

        # Namespace off: the topic follows, its state and cursor are gone (T2/T3).
        http(broker.http, "POST", ns_path, "false")
        assert http(broker.http, "GET", ns_path) is False
        assert dedup_stats(broker.http, topic) == {"enabled": False}
        send_all(producer, [2])  # no dedup: stored again
        producer.close()
        producer = producer_of(client, topic, batching=False)
        assert producer.last_sequence_id() == -1

        # Topic policy on beats the namespace's off; tracking starts afresh.
        http(broker.http, "POST", topic_flag, "true")
        assert http(broker.http, "GET", topic_flag) is True
        stats = dedup_stats(broker.http, topic)
        assert (stats["enabled"], stats["trackedProducers"]) == (True, 0)
        send_all(producer, [10, 10])
        assert read_all(client, topic) == [b"m-0", b"m-1", b"m-2", b"m-2", b"m-10"]
        client.close()

        # Policies are persisted: after a restart the topic policy still wins.
        broker = restart(broker)
        client = new_client(broker.url)
        assert http(broker.http, "GET", ns_path) is False
        assert http(broker.http, "GET", topic_flag) is True
        producer = producer_of(client, topic, batching=False)
        assert producer.last_sequence_id() == 10  # only what followed re-enabling
        producer.close()

        # Removing the topic policy falls back to the namespace's off.
        http(broker.http, "DELETE", topic_flag)
        assert http(broker.http, "GET", topic_flag) is None
        assert dedup_stats(broker.http, topic) == {"enabled": False}
        http(broker.http, "DELETE", ns_path)  # and then to the broker flag (on)
        assert dedup_stats(broker.http, topic)["enabled"] is True
    finally:
        client.close()
        broker.stop()


def test_broker_flag_off_returns_minus_one_and_keeps_duplicates(tmp_path: Path) -> None:
    config = broker_config(tmp_path / "data", broker_deduplication_enabled=False)
    broker = BrokerThread(config).start()
    client = new_client(broker.url)
    try:
        topic = new_topic()
        producer = producer_of(client, topic, batching=False)
        send_all(producer, [0, 0])
        producer.close()
        assert producer_of(client, topic, batching=False).last_sequence_id() == -1
        assert read_all(client, topic) == [b"m-0", b"m-0"]
    finally:
        client.close()
        broker.stop()


def test_rest_rejects_a_body_that_is_not_a_boolean(broker: BrokerThread) -> None:
    with pytest.raises(urllib.error.HTTPError) as failure:
        http(broker.http, "POST", "/admin/v2/namespaces/public/default/deduplication", "yes")
    failure.value.close()
    assert failure.value.code == 400


# --------------------------------------------------------------------------- stats


def test_stats_report_the_dedup_state(tmp_path: Path) -> None:
    config = broker_config(tmp_path / "data", broker_deduplication_entries_interval=5)
    broker = BrokerThread(config).start()
    client = new_client(broker.url)
    try:
        topic = new_topic()
        producer = producer_of(client, topic, batching=False)
        ids = send_all(producer, list(range(5)))  # the 5th persisted entry triggers a snapshot
        send_all(producer, [5])
        send_all(producer, [1])
        stats = dedup_stats(broker.http, topic)
        fifth = ids[4]
        assert stats["enabled"] is True
        assert stats["trackedProducers"] == 1
        assert stats["connectedProducers"] == 1
        assert stats["duplicatesDropped"] == 1
        assert stats["unknownAnswers"] == 0
        assert stats["lastSnapshotPosition"] == f"{fifth.ledger_id()}:{fifth.entry_id()}"
        assert isinstance(stats["lastSnapshotTime"], float)
        assert stats["entriesSinceSnapshot"] == 1
    finally:
        client.close()
        broker.stop()
