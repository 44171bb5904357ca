"""The idempotency window at the Topic/ledger level, on real files: the publish path (in-flight
keys, failed writes), the snapshot on the reserved cursor, recovery after a clean close and
after a crash (``Topic.abandon``: nothing flushed, snapshotted or persisted), PIP-6 beside it."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import replace
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.errors import NotAllowed, PersistenceError
from broker.publish.dedup_snapshot import dedup_config_from, recover_dedup
from broker.publish.idempotency_snapshot import (
    encode_snapshot,
    recover_window,
    take_snapshot,
    window_config_from,
)
from broker.publish.idempotency_window import (
    IDEMPOTENCY_CURSOR,
    IDEMPOTENCY_KEY_PROPERTY,
    IdempotencyWindow,
    WindowConfig,
)
from broker.publish.producers import Producer
from broker.storage import Ledger, LedgerConfig, Position, cursor_file
from broker.storage.cursor_file import CursorState, encode_cursor_document, read_cursor_log
from broker.storage.files import read_file
from broker.topics.topic import Topic
from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.metadata import encode_entry
from tests.broker.storage.faults import FaultyLayer
from tests.broker.topics.test_topic_dedup import TOPIC, connect

LEDGER_CONFIG = LedgerConfig(
    max_entries_per_ledger=5,
    preallocate_bytes=0,
    persist_interval_s=0,
    retention_time_minutes=-1,
    retention_size_mb=-1,
)


def config(**overrides: object) -> BrokerConfig:
    base = BrokerConfig(
        broker_deduplication_entries_interval=4,
        broker_deduplication_snapshot_frequency_in_seconds=0,
        managed_ledger_cursor_persist_interval_ms=50,
        journal_max_group_wait_msec=0,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


async def open_topic(
    directory: Path, broker_config: BrokerConfig, layer: FaultyLayer | None = None
) -> Topic:
    ledger = await asyncio.to_thread(Ledger.open, directory, LEDGER_CONFIG, file_layer=layer)
    dedup = await asyncio.to_thread(recover_dedup, ledger, dedup_config_from(broker_config))
    window = await asyncio.to_thread(recover_window, ledger, window_config_from(broker_config))
    topic = Topic(TOPIC, ledger, broker_config, dedup=dedup)
    topic.idempotency = window
    return topic


def single(key: str | None, sequence_id: int, name: str = "p") -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    if key is not None:
        metadata.properties.add(key=IDEMPOTENCY_KEY_PROPERTY, value=key)
    return encode_entry(metadata, f"{key}".encode())


def batch(keys: list[str | None], sequence_id: int, name: str = "p") -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    metadata.num_messages_in_batch = len(keys)
    payload = encode_batch(
        SingleMessage(
            payload=b"m", properties={IDEMPOTENCY_KEY_PROPERTY: k} if k is not None else {}
        )
        for k in keys
    )
    return encode_entry(metadata, payload)


async def send(
    topic: Topic, producer: Producer, key: str | None, sequence_id: int
) -> Position | None:
    return await topic.publish(producer, sequence_id, sequence_id, single(key, sequence_id))


def stored(topic: Topic) -> int:
    ledger = topic.ledger
    return sum(1 for _ in ledger.iter_entries(ledger.next_position(ledger.before_first_position())))


async def test_in_flight_key_is_refused_retriably_and_never_stored_twice(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config())
    try:
        first, second = await connect(topic, "p1"), await connect(topic, "p2")
        pending = topic.publish(first, 0, 0, single("k", 0, "p1"))
        with pytest.raises(PersistenceError, match="still being written"):
            topic.publish(second, 0, 0, single("k", 0, "p2"))
        original = await pending
        assert await topic.publish(second, 1, 1, single("k", 1, "p2")) == original
        assert stored(topic) == 1
    finally:
        await topic.close()


async def test_failed_write_forgets_its_keys(tmp_path: Path) -> None:
    layer = FaultyLayer()
    topic = await open_topic(tmp_path / "t", config(), layer)
    try:
        producer = await connect(topic, "p1")
        layer.fail("fdatasync", errno.EIO, suffix=".seg")
        with pytest.raises(PersistenceError):
            await send(topic, producer, "k", 0)
        producer = await connect(topic, "p1b")  # a reconnect: a new producer object
        assert await send(topic, producer, "k", 0) is not None  # stored now, once
    finally:
        await topic.close()


async def test_window_and_hidden_indexes_survive_close_and_crash(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    topic = await open_topic(directory, config())
    producer = await connect(topic, "p1")
    a = await send(topic, producer, "a", 0)
    mixed = await topic.publish(producer, 1, 3, batch(["b", "a", "c"], 1))
    assert mixed is not None
    assert topic.hidden_indexes(mixed) == 0b010
    await topic.close()

    topic = await open_topic(directory, config())  # clean: everything in the snapshot
    assert topic.idempotency is not None
    assert topic.idempotency.replayed_entries == 0
    assert topic.hidden_indexes(mixed) == 0b010
    producer = await connect(topic, "p2")
    assert await send(topic, producer, "a", 0) == a
    # Past the snapshot interval, then more after it.
    numbered = [await send(topic, producer, f"n{n}", 1 + n) for n in range(6)]
    late = await topic.publish(producer, 7, 8, batch(["n5", "z"], 7))
    assert late is not None
    await topic.abandon()  # kill -9: the snapshot on the cursor is older than the log's end

    topic = await open_topic(directory, config())
    try:
        window = topic.idempotency
        assert window is not None
        assert window.replayed_entries > 0
        producer = await connect(topic, "p3")
        assert await send(topic, producer, "a", 0) == a
        assert await send(topic, producer, "z", 1) == late
        assert await send(topic, producer, "n0", 2) == numbered[0]
        assert await send(topic, producer, "n5", 3) == numbered[5]
        assert topic.hidden_indexes(mixed) == 0b010
        assert topic.hidden_indexes(late) == 0b01
        assert IDEMPOTENCY_CURSOR not in topic.subscriptions
        with pytest.raises(NotAllowed, match="reserved"):
            await topic.get_or_create_subscription(
                IDEMPOTENCY_CURSOR, durable=True, start=None, initial_earliest=True
            )
    finally:
        await topic.close()


async def test_pip6_duplicate_does_not_enter_the_window(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config())
    try:
        producer = await connect(topic, "p1")
        await send(topic, producer, "a", 5)
        assert await send(topic, producer, "new-key", 5) is None  # PIP-6: -1:-1
        assert topic.idempotency is not None
        assert topic.idempotency.original_of("new-key") is None
        assert stored(topic) == 1
    finally:
        await topic.close()


async def test_a_pip6_refusal_releases_the_key_it_reserved(tmp_path: Path) -> None:
    """The SEND path reserves a single key before PIP-6 looks (issue #26): PIP-6's duplicate
    and its "unknown" answer both give the key back, so nothing of it stays in the window and
    the key is new on its next SEND."""
    topic = await open_topic(tmp_path / "t", config())
    window = topic.idempotency
    assert window is not None
    try:
        producer = await connect(topic, "p1")
        pending = topic.publish(producer, 6, 6, single("a", 6, "p1"))
        with pytest.raises(PersistenceError, match="Cannot determine"):
            topic.publish(producer, 6, 6, single("x", 6, "p1"))  # id 6 in flight: unknown
        await pending
        assert await send(topic, producer, "y", 6) is None  # PIP-6 duplicate: -1:-1
        assert len(window) == 1  # only "a": no slot of "x" or "y" is left in flight
        assert window.original_of("x") is None
        assert window.original_of("y") is None
        stored_x = await send(topic, producer, "x", 7)
        stored_y = await send(topic, producer, "y", 8)
        assert stored_x is not None
        assert stored_y is not None
        assert window.original_of("x") == (stored_x, 0)
        assert stored(topic) == 3
    finally:
        await topic.close()


def test_the_snapshot_file_holds_the_document_the_dict_encoding_wrote(tmp_path: Path) -> None:
    """take_snapshot has the table render the keys as JSON text and the cursor write splice it
    in (issue #26 item 6): the file holds the very document that the dict of `encode_snapshot`
    (what the builds before wrote) gives, and a reopened ledger recovers the same window."""
    ledger = Ledger.open(tmp_path / "t", LEDGER_CONFIG)
    clock = lambda: 1_700_000_000.0004  # noqa: E731
    live = IdempotencyWindow(WindowConfig(3600, 1000), clock)
    for i in range(30):  # every third entry a batch repeating a key: hidden indexes too
        keys: list[str | None] = [f"k{i}", f"k{i - 1}"] if i % 3 == 2 else [f"k{i}"]
        entry = batch(keys, i) if len(keys) > 1 else single(keys[0], i)
        live.on_persisted(live.admit(live.check(keys)), ledger.append(entry))
    ledger.flush()
    records, hidden = live.snapshot_records()
    assert hidden  # the case is covered
    take_snapshot(ledger, live)
    cursor = ledger.open_cursor(IDEMPOTENCY_CURSOR)
    cursor.persist()
    path = cursor_file(tmp_path / "t", IDEMPOTENCY_CURSOR)
    written = read_cursor_log(read_file(path), path)[0]
    before = CursorState(
        IDEMPOTENCY_CURSOR, cursor.mark_delete_position, encode_snapshot(records, hidden)
    )
    assert written == encode_cursor_document(before, 1, 1)
    ledger.close()
    reopened = Ledger.open(tmp_path / "t", LEDGER_CONFIG)
    recovered = recover_window(reopened, live.config, clock)
    assert recovered.replayed_entries == 0
    assert recovered.snapshot_records() == (records, hidden)
    reopened.close()
