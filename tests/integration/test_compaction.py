"""Compaction with the official client (its own scenarios, ``CompactionTest``): the latest value
per key, a null value deletes its key, batched and not, ``is_read_compacted`` true and false on
the same topic; the REST trigger and status; readers across the horizon."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.helpers import BrokerThread, close_client, new_client, topic_stats, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def _compaction_url(broker: BrokerThread, topic: str) -> str:
    return f"{broker.http}/admin/v2/persistent/{topic.removeprefix('persistent://')}/compaction"


def compaction_status(broker: BrokerThread, topic: str) -> dict[str, Any]:
    with urllib.request.urlopen(_compaction_url(broker, topic), timeout=10) as reply:
        status: dict[str, Any] = json.loads(reply.read())
    return status


def compact(broker: BrokerThread, topic: str) -> None:
    """PUT .../compaction, then wait for SUCCESS."""
    request = urllib.request.Request(_compaction_url(broker, topic), method="PUT")
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 204
    wait_until(lambda: compaction_status(broker, topic)["status"] != "RUNNING")
    assert compaction_status(broker, topic) == {"status": "SUCCESS", "lastError": ""}


def read_compacted(client: pulsar.Client, topic: str) -> list[tuple[str | None, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    try:
        out: list[tuple[str | None, bytes]] = []
        while reader.has_message_available():
            message = reader.read_next(5000)
            out.append((message.partition_key() or None, message.data()))
        return out
    finally:
        reader.close()


def publish(
    client: pulsar.Client, topic: str, items: list[tuple[str | None, bytes]], *, batch: bool
) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batch,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=50,
    )
    try:
        for key, value in items:
            if key is None:
                producer.send_async(value, None)
            else:
                producer.send_async(value, None, partition_key=key)
        producer.flush()
    finally:
        producer.close()


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batched"])
def test_latest_value_per_key_and_null_deletes(broker: BrokerThread, batch: bool) -> None:
    topic = f"persistent://public/default/compact-{'b' if batch else 's'}"
    client = new_client(broker.url)
    try:
        items: list[tuple[str | None, bytes]] = [
            ("a", b"a1"),
            ("b", b"b1"),
            (None, b"no-key-1"),
            ("a", b"a2"),
            ("c", b"c1"),
            ("b", b""),  # deletes b
            ("c", b"c2"),
            (None, b"no-key-2"),
        ]
        publish(client, topic, items, batch=batch)
        compact(broker, topic)
        assert read_compacted(client, topic) == [
            (None, b"no-key-1"),
            ("a", b"a2"),
            ("c", b"c2"),
            (None, b"no-key-2"),
        ]
        # The same topic, is_read_compacted false: the whole log.
        assert [v for _, v in read_all_plain(client, topic)] == [v for _, v in items]
        # A tail after the horizon: compacted view, then the log as it is.
        publish(client, topic, [("a", b"a3"), ("d", b"")], batch=batch)
        assert read_compacted(client, topic) == [
            (None, b"no-key-1"),
            ("a", b"a2"),
            ("c", b"c2"),
            (None, b"no-key-2"),
            ("a", b"a3"),
            ("d", b""),
        ]
        compact(broker, topic)
        assert read_compacted(client, topic) == [
            (None, b"no-key-1"),
            ("c", b"c2"),
            (None, b"no-key-2"),
            ("a", b"a3"),
        ]
    finally:
        close_client(client)


def read_all_plain(client: pulsar.Client, topic: str) -> list[tuple[str | None, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=False)
    try:
        out: list[tuple[str | None, bytes]] = []
        while reader.has_message_available():
            message = reader.read_next(5000)
            out.append((message.partition_key() or None, message.data()))
        return out
    finally:
        reader.close()


def test_compacted_consumer_subscription(broker: BrokerThread) -> None:
    """A durable Exclusive consumer with is_read_compacted, next to a plain one."""
    topic = "persistent://public/default/compact-consumer"
    client = new_client(broker.url)
    try:
        compacted = client.subscribe(
            topic,
            "compacted",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        plain = client.subscribe(topic, "plain", initial_position=pulsar.InitialPosition.Earliest)
        compacted.close()  # a compacted view read from the start on the next subscribe
        publish(client, topic, [("k", b"1"), ("k", b"2"), ("k", b"3")], batch=False)
        compact(broker, topic)
        compacted = client.subscribe(
            topic,
            "compacted",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        message = compacted.receive(5000)
        assert message.data() == b"3"
        stats = topic_stats(broker.http, topic)["compaction"]
        assert stats["lastCompactionRemovedEventCount"] == 2
        assert stats["lastCompactionSucceedTimestamp"] > 0
        compacted.acknowledge(message)
        with pytest.raises(pulsar.Timeout):
            compacted.receive(200)
        assert [plain.receive(5000).data() for _ in range(3)] == [b"1", b"2", b"3"]
    finally:
        close_client(client)


def test_shared_read_compacted_is_refused_and_second_put_conflicts(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-refused"
    client = new_client(broker.url, operation_timeout=5)
    try:
        client.create_producer(topic).close()
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(
                topic, "shared", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True
            )
        assert compaction_status(broker, topic) == {"status": "NOT_RUN", "lastError": ""}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                urllib.request.Request(
                    _compaction_url(broker, "persistent://public/default/none"), method="PUT"
                ),
                timeout=10,
            )
        assert refused.value.code == 404
        refused.value.close()
    finally:
        close_client(client)


def _namespace_threshold(broker: BrokerThread, value: int | None) -> None:
    url = f"{broker.http}/admin/v2/namespaces/public/default/compactionThreshold"
    if value is None:
        request = urllib.request.Request(url, method="DELETE")
    else:
        request = urllib.request.Request(
            url,
            data=str(value).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
    with urllib.request.urlopen(request, timeout=10):
        pass


def test_compaction_runs_by_itself_past_the_namespace_threshold(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-threshold"
    client = new_client(broker.url)
    try:
        publish(client, topic, [("k", b"small")], batch=False)
        _namespace_threshold(broker, 4096)
        with urllib.request.urlopen(
            f"{broker.http}/admin/v2/namespaces/public/default/compactionThreshold", timeout=10
        ) as reply:
            assert json.loads(reply.read()) == 4096
        assert compaction_status(broker, topic)["status"] == "NOT_RUN"  # below the threshold
        publish(client, topic, [("k", b"x" * 1000) for _ in range(8)], batch=False)
        wait_until(lambda: compaction_status(broker, topic)["status"] == "SUCCESS", timeout=15)
        assert read_compacted(client, topic) == [("k", b"x" * 1000)]
    finally:
        _namespace_threshold(broker, None)
        close_client(client)


def test_seek_and_has_message_available_across_the_horizon(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-seek"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [
            producer.send(v, partition_key=k) for k, v in [("a", b"1"), ("a", b"2"), ("b", b"1")]
        ]
        compact(broker, topic)
        ids += [producer.send(b"3", partition_key="a")]  # the tail
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        # A reader's seek is exclusive (as the official client's): the next survivor after it.
        reader.seek(ids[0])  # a compacted-away id inside the view
        assert reader.read_next(5000).data() == b"2"
        reader.seek(ids[2])  # the view's last entry: the tail comes next
        assert reader.read_next(5000).data() == b"3"
        assert not reader.has_message_available()
        reader.seek(ids[1])
        assert reader.has_message_available()
        assert [reader.read_next(5000).data() for _ in range(2)] == [b"1", b"3"]
        assert not reader.has_message_available()
        reader.close()
        # A reader started inside the view: the survivors after its start, then the tail.
        start = client.create_reader(topic, ids[0], is_read_compacted=True)
        assert [start.read_next(5000).data() for _ in range(3)] == [b"2", b"1", b"3"]
        assert not start.has_message_available()
        start.close()
    finally:
        close_client(client)


def test_dedup_epochs_and_batch_index_acks_keep_working(broker: BrokerThread) -> None:
    topic = "persistent://public/default/compact-features"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(
            topic,
            producer_name="writer",
            access_mode=pulsar.ProducerAccessMode.Exclusive,
            batching_enabled=False,
        )
        producer.send(b"a1", partition_key="a", sequence_id=1)
        producer.send(b"a2", partition_key="a", sequence_id=2)
        compact(broker, topic)
        # Dedup: a resent id is still known after compaction.
        assert str(producer.send(b"a2", partition_key="a", sequence_id=2)) == "(-1,-1,-1,-1)"
        # PIP-68: the exclusive producer still holds the topic; another is refused.
        with pytest.raises(pulsar.ProducerFenced):  # as Java answers a second Exclusive
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        producer.close()
        # Batch-index acks on a compacted consumer of rewritten batches.
        batched = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=50
        )
        for k, v in [("x", b"1"), ("y", b"1"), ("x", b"2"), ("z", b"1")]:
            batched.send_async(v, None, partition_key=k)
        batched.flush()
        compact(broker, topic)
        consumer = client.subscribe(
            topic,
            "c",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=True,
        )
        first = [consumer.receive(5000) for _ in range(4)]
        assert [m.data() for m in first] == [b"a2", b"1", b"2", b"1"]
        consumer.acknowledge(first[0])
        consumer.acknowledge(first[2])  # one message of the rewritten batch
        consumer.close()
        consumer = client.subscribe(
            topic,
            "c",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=True,
        )
        again = []
        while True:
            try:
                again.append(consumer.receive(1000).data())
            except pulsar.Timeout:
                break
        assert again == [b"1", b"1"]
    finally:
        close_client(client)


def test_partitioned_topic_compaction_and_table_view(broker: BrokerThread) -> None:
    from client.sync import Client

    topic = "persistent://public/default/compact-partitioned"
    request = urllib.request.Request(
        f"{broker.http}/admin/v2/persistent/public/default/compact-partitioned/partitions",
        data=b"2",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
    client = new_client(broker.url)
    ours = Client(broker.url)
    try:
        items: list[tuple[str | None, bytes]] = [(f"k{i % 6}", f"v{i}".encode()) for i in range(30)]
        items += [("k0", b""), ("k1", b"")]
        publish(client, topic, items, batch=True)
        request = urllib.request.Request(_compaction_url(broker, topic), method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        for i in range(2):
            partition = f"{topic}-partition-{i}"
            wait_until(lambda p=partition: compaction_status(broker, p)["status"] == "SUCCESS")  # type: ignore[misc]
        view = ours.create_table_view(topic)
        assert dict(view.items()) == {f"k{i}": f"v{24 + i}".encode() for i in range(2, 6)}
        view.close()
    finally:
        ours.close()
        close_client(client)


def test_magnetar_admin_compact_and_status(broker: BrokerThread) -> None:
    from click.testing import CliRunner

    from broker.admin_cli import main

    topic = "persistent://public/default/compact-cli"
    client = new_client(broker.url)
    try:
        publish(client, topic, [("k", b"1"), ("k", b"2")], batch=False)

        def cli(*args: str) -> str:
            result = CliRunner().invoke(
                main, ["--admin-url", broker.http, *args], catch_exceptions=False
            )
            assert result.exit_code == 0, result.output
            return result.output

        assert "started" in cli("topics", "compact", topic)
        wait_until(lambda: compaction_status(broker, topic)["status"] == "SUCCESS")
        assert json.loads(cli("topics", "compaction-status", topic, "--json")) == {
            "status": "SUCCESS",
            "lastError": "",
        }
        assert read_compacted(client, topic) == [("k", b"2")]
    finally:
        close_client(client)


def test_a_reader_keeps_its_view_when_a_compaction_finishes_mid_read(broker: BrokerThread) -> None:
    """Found by the leader-state test: a reader that read key b from the old view must still
    see b's deletion, which the new view no longer holds."""
    from client import MessageId
    from client.sync import Client

    topic = "persistent://public/default/compact-mid-read"
    ours = Client(broker.url)
    try:
        producer = ours.create_producer(topic)
        producer.send(b"1", partition_key="b")
        producer.send(b"1", partition_key="a")
        compact(broker, topic)  # view 1: b=1, a=1
        producer.send(b"", partition_key="b")  # deletes b
        producer.send(b"2", partition_key="a")
        reader = ours.create_reader(
            topic, MessageId.earliest, receiver_queue_size=1, is_read_compacted=True
        )
        first = reader.read_next(5000)
        assert (first.partition_key(), first.data()) == ("b", b"1")
        compact(broker, topic)  # view 2: a=2 only
        table = {"b": b"1"}
        while reader.has_message_available():
            message = reader.read_next(5000)
            if message.data():
                table[message.partition_key()] = message.data()
            else:
                table.pop(message.partition_key(), None)
        assert table == {"a": b"2"}
        reader.close()
        # A new reader reads the new view.
        assert read_compacted_ours(ours, topic) == [("a", b"2")]
    finally:
        ours.close()


def read_compacted_ours(client: Any, topic: str) -> list[tuple[str, bytes]]:
    from client import MessageId

    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    out = []
    while reader.has_message_available():
        message = reader.read_next(5000)
        out.append((message.partition_key(), message.data()))
    reader.close()
    return out
