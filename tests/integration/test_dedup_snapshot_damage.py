"""A damaged PIP-6 snapshot is detected and rebuilt by a full replay; other damage refuses."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.storage import cursor_file
from broker.storage.paths import topic_directory
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, broker_config, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TOPIC = "persistent://public/default/damaged-snapshot"


def _flip_a_byte(path: Path) -> None:
    """Damage the first record of a cursor log (the zeros a log is pre-filled with hold
    nothing, and its last record may be read as a save a crash cut short)."""
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))


def _publish(data_dir: Path, ids: range) -> None:
    running = BrokerThread(broker_config(data_dir, broker_deduplication_entries_interval=5)).start()
    client = new_client(running.url)
    try:
        client.subscribe(TOPIC, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        for seq in ids:
            producer.send(f"m-{seq}".encode(), sequence_id=seq)
    finally:
        client.close()
        running.stop()


def test_damaged_dedup_snapshot_is_set_aside_and_rebuilt_by_replay(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _publish(data_dir, range(1, 31))
    snapshot = cursor_file(topic_directory(data_dir, TopicName.parse(TOPIC)), DEDUP_CURSOR)
    assert snapshot.exists()
    _flip_a_byte(snapshot)

    running = BrokerThread(broker_config(data_dir)).start()
    client = new_client(running.url)
    try:
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        assert producer.last_sequence_id() == 30  # rebuilt from the log, not from the snapshot
        for seq in range(25, 31):
            assert producer.send(f"again-{seq}".encode(), sequence_id=seq).entry_id() == -1
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(reader.read_next(5000).data())
        assert stored == [f"m-{seq}".encode() for seq in range(1, 31)]
    finally:
        client.close()
        running.stop()
    assert snapshot.with_name(snapshot.name + ".corrupt").exists()


def test_damaged_subscription_cursor_refuses_to_open_the_topic(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _publish(data_dir, range(1, 6))
    _flip_a_byte(cursor_file(topic_directory(data_dir, TopicName.parse(TOPIC)), "keep"))
    running = BrokerThread(broker_config(data_dir)).start()
    client = new_client(running.url, operation_timeout=2)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(TOPIC)
    finally:
        client.close()
        running.stop()
