"""Issue #10 item 1: nothing unparseable is stored, and an unreadable entry already on disk
(an older build's write, or damage the CRC cannot see) never blocks a reader, a consumer, a
seek, GET_LAST_MESSAGE_ID or the dedup replay: it is skipped, logged once and counted."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pulsar
import pytest

from broker.storage import Ledger
from broker.storage.paths import topic_directory
from broker.topics.topic import ledger_config_from
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName
from tests.helpers import (
    BrokerThread,
    broker_config,
    close_client,
    new_client,
    topic_stats,
    wait_until,
)
from tests.raw_client import RawConnection, T, send_outcomes

pytestmark = [pytest.mark.integration, pytest.mark.compat]

GARBAGE_METADATA = b"\x00\x00\x00\x08" + b"\xff" * 8 + b"payload"


def _valid(name: str, seq: int, payload: bytes, **fields: object) -> bytes:
    now_ms = int(time.time() * 1000)
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=now_ms)
    for field, value in fields.items():
        setattr(metadata, field, value)
    return encode_entry(metadata, payload)


def _missing_publish_time() -> bytes:
    header = pb.MessageMetadata(producer_name="raw", sequence_id=1).SerializePartialToString()
    return len(header).to_bytes(4, "big") + header + b"payload"


@pytest.mark.parametrize(
    ("bad_send", "reason"),
    [
        (commands.send(1, 1, GARBAGE_METADATA), "cannot parse MessageMetadata"),
        (commands.send(1, 1, _missing_publish_time()), "lacks"),
        (
            commands.send(1, 1, _valid("raw", 1, b"b", num_messages_in_batch=3), num_messages=5),
            "contradicts",
        ),
    ],
    ids=["garbage-metadata", "missing-required-field", "batch-count-contradiction"],
)
def test_a_malformed_send_is_refused_and_the_producer_goes_on(
    tmp_path: Path, bad_send: bytes, reason: str
) -> None:
    topic = f"persistent://public/default/bad-send-{uuid.uuid4().hex[:8]}"
    running = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        with RawConnection(running.port) as conn:
            conn.handshake()
            conn.create_producer(topic, 1, "raw")
            conn.send(commands.send(1, 0, _valid("raw", 0, b"before")))
            conn.send(bad_send)
            conn.send(commands.send(1, 2, _valid("raw", 2, b"after")))
            conn.wait_for(T.SEND_RECEIPT, 2)
            errors = conn.of_type(T.SEND_ERROR)
            # In SEND order, and the bad SEND took no position in the log.
            outcomes = send_outcomes(conn)
            ledger = str(outcomes[0][1]).split(":")[0]
            assert outcomes == [
                (0, f"{ledger}:0"),
                (1, ServerError.ChecksumError),
                (2, f"{ledger}:1"),
            ]
            assert reason in errors[0].command.send_error.message
            assert "Invalid message metadata" in errors[0].command.send_error.message
            assert conn.of_type(T.CLOSE_PRODUCER) == []
    finally:
        running.stop()
    running = BrokerThread(broker_config(tmp_path / "data")).start()
    client = new_client(running.url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(5000).data() for _ in range(2)]
        assert got == [b"before", b"after"]
        assert not reader.has_message_available()
    finally:
        close_client(client)
        running.stop()


def _append_behind_the_broker(data_dir: Path, topic: str, entries: list[bytes]) -> None:
    """Write entries straight into a stopped topic's ledger, as an older build could have."""
    config = broker_config(data_dir)
    directory = topic_directory(config.data_path, TopicName.parse(topic))
    ledger = Ledger.open(directory, ledger_config_from(config))
    try:
        for entry in entries:
            ledger.append(entry)
        ledger.flush()
    finally:
        ledger.close()


def test_unreadable_entries_on_disk_are_skipped_everywhere(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = f"persistent://public/default/unreadable-{uuid.uuid4().hex[:8]}"
    running = BrokerThread(broker_config(data)).start()
    client = new_client(running.url)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, producer_name="old", batching_enabled=False)
        for seq in range(1, 4):
            producer.send(f"m{seq}".encode(), sequence_id=seq)
        producer.close()
        consumer.close()
    finally:
        close_client(client)
        running.stop()

    _append_behind_the_broker(
        data,
        topic,
        [GARBAGE_METADATA, _valid("old", 10, b"m10"), b"\x00\x00\x00\x00", GARBAGE_METADATA],
    )

    running = BrokerThread(broker_config(data)).start()
    client = new_client(running.url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():  # true exactly while a readable one is left
            got.append(reader.read_next(5000).data())
        assert got == [b"m1", b"m2", b"m3", b"m10"]

        consumer = client.subscribe(topic, "sub")
        received = [consumer.receive(5000) for _ in range(4)]
        assert [m.data() for m in received] == got
        for message in received:
            consumer.acknowledge(message)

        def backlog_is_empty() -> bool:
            stats = topic_stats(running.http, topic)
            return stats["subscriptions"]["sub"]["msgBacklog"] == 0

        wait_until(backlog_is_empty)
        stats = topic_stats(running.http, topic)
        assert stats["unreadableEntries"] == 3  # each logged and counted once
        assert stats["deduplication"]["unreadableEntriesSkipped"] == 3
        assert stats["subscriptions"]["sub"]["unreadableEntriesSkipped"] == 3

        seeker = client.subscribe(topic, "by-time", initial_position=pulsar.InitialPosition.Latest)
        seeker.seek(0)  # seek by publish time walks over the unreadable entries
        assert seeker.receive(5000).data() == b"m1"

        producer = client.create_producer(topic, producer_name="old")
        assert producer.last_sequence_id() == 10  # the replay read past the bad entries
        producer.send(b"m10-again", sequence_id=10)  # a duplicate: not stored
        producer.send(b"m11", sequence_id=11)
        assert consumer.receive(5000).data() == b"m11"
    finally:
        close_client(client)
        running.stop()
