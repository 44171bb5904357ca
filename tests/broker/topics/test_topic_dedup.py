"""PIP-6 dedup at the Topic/ledger level, on real files: the publish path, snapshots, recovery.

The centre piece is the property test "recovery equals the model": random schedules of produce,
resend, injected write failures, cursor persistence, crashes (the process dies: nothing flushed,
nothing persisted, nobody answered) and clean restarts. Producers behave like the official
client: sequential ids, batches, and after any failure or reconnect they resend every message
not yet acknowledged, in order and identically. After every recovery the dedup marks must equal
a model computed from the log itself, and at the end every message must be in the log exactly
once, in order (no loss, no duplicate).
"""

from __future__ import annotations

import asyncio
import errno
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.admin.stats import dedup_stats
from broker.config import BrokerConfig
from broker.errors import BrokerError, PersistenceError
from broker.publish.dedup import DedupState
from broker.publish.dedup_snapshot import (
    DEDUP_CURSOR,
    dedup_config_from,
    exact_batch_highest_sequence_id,
    recover_dedup,
)
from broker.publish.producers import Producer
from broker.service import BrokerService
from broker.storage import Ledger, LedgerConfig, Position
from broker.topics.topic import Topic
from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.enums import InitialPosition, ProducerAccessMode
from protocol.metadata import encode_entry, parse_entry_metadata
from protocol.topic_name import TopicName
from tests.broker.storage.faults import FaultyLayer

TOPIC = TopicName.parse("persistent://public/default/dedup-topic")
# Small segments (rolls inside a group commit), every cursor change persisted at once, and
# infinite retention: the model is computed from the whole log, so nothing may be trimmed.
LEDGER_CONFIG = LedgerConfig(
    max_entries_per_ledger=7,
    preallocate_bytes=0,
    persist_interval_s=0,
    retention_time_minutes=-1,
    retention_size_mb=-1,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """The ProducerSink a connection would be; records what the topic asked of it."""

    def __init__(self) -> None:
        self.closed: list[Producer] = []

    def close_producer(self, producer: Producer) -> None:
        self.closed.append(producer)

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        pass

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        pass

    async def check_alive(self) -> bool:
        return False


def config(**overrides: object) -> BrokerConfig:
    base = BrokerConfig(
        broker_deduplication_entries_interval=3,
        broker_deduplication_snapshot_frequency_in_seconds=0,
        managed_ledger_cursor_persist_interval_ms=50,
        journal_max_group_wait_msec=0,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def entry(name: str, first: int, count: int = 1, *, ids: list[int] | None = None) -> bytes:
    """A stored entry as the C++ client builds it: batch metadata carries only the first id."""
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=first, publish_time=1)
    if count == 1 and ids is None:
        return encode_entry(metadata, f"{name}:{first}".encode())
    seqs = ids if ids is not None else list(range(first, first + count))
    metadata.num_messages_in_batch = len(seqs)
    payload = encode_batch(SingleMessage(payload=b"m", sequence_id=s) for s in seqs)
    return encode_entry(metadata, payload)


async def open_topic(
    directory: Path,
    broker_config: BrokerConfig,
    *,
    layer: FaultyLayer | None = None,
    clock: Callable[[], float] | None = None,
    dedup: bool = True,
) -> Topic:
    """What BrokerService does on load: open the ledger, recover dedup, build the topic."""
    ledger = await asyncio.to_thread(Ledger.open, directory, LEDGER_CONFIG, file_layer=layer)
    state = (
        await asyncio.to_thread(
            recover_dedup, ledger, dedup_config_from(broker_config), now=(clock or FakeClock())()
        )
        if dedup
        else None
    )
    kwargs = {} if clock is None else {"clock": clock}
    return Topic(TOPIC, ledger, broker_config, dedup=state, **kwargs)


async def connect(topic: Topic, name: str) -> Producer:
    producer = Producer(
        producer_id=1,
        name=name,
        mode=ProducerAccessMode.Shared,
        sink=Sink(),
        connection_key=object(),
        request_id=1,
    )
    assert await topic.add_producer(producer, None)
    return producer


async def publish(topic: Topic, producer: Producer, first: int, count: int = 1) -> Position | None:
    high = first + count - 1
    return await topic.publish(producer, first, high, entry(producer.name, first, count))


def log_of(topic: Topic) -> list[tuple[str, int, int]]:
    """(producer, first id, number of messages) of every entry in the ledger, in order."""
    ledger = topic.ledger
    start = ledger.next_position(ledger.before_first_position())
    out = []
    for _position, data in ledger.iter_entries(start):
        meta = parse_entry_metadata(data)
        out.append((meta.producer_name, meta.sequence_id, meta.num_messages))
    return out


def model_of(log: list[tuple[str, int, int]]) -> dict[str, int]:
    marks: dict[str, int] = {}
    for name, first, count in log:
        marks[name] = max(first + count - 1, marks.get(name, -1))
    return marks


@pytest.fixture
async def topic(tmp_path: Path) -> AsyncIterator[Topic]:
    opened = await open_topic(tmp_path / "t", config())
    yield opened
    await opened.close()


# --------------------------------------------------------------------------- publish path


async def test_new_entries_get_positions_and_resends_get_dup(topic: Topic) -> None:
    producer = await connect(topic, "p1")
    first = await publish(topic, producer, 0)
    second = await publish(topic, producer, 1, 5)
    assert first is not None
    assert second is not None
    assert second > first
    assert await publish(topic, producer, 0) is None  # D3/D5: receipt -1:-1, nothing stored
    assert await publish(topic, producer, 1, 5) is None
    assert log_of(topic) == [("p1", 0, 1), ("p1", 1, 5)]
    assert topic.last_sequence_id("p1") == 5
    stats = dedup_stats(topic)
    assert (stats["duplicatesDropped"], stats["accepted"]) == (2, 2)


async def test_resend_while_in_flight_is_unknown(topic: Topic) -> None:
    """D6: the second copy is refused (the client resends later), not written."""
    producer = await connect(topic, "p1")
    pending = topic.publish(producer, 7, 7, entry("p1", 7))
    with pytest.raises(PersistenceError, match="duplicate at this time"):
        topic.publish(producer, 7, 7, entry("p1", 7))
    await pending
    assert await publish(topic, producer, 7) is None
    assert log_of(topic) == [("p1", 7, 1)]
    assert dedup_stats(topic)["unknownAnswers"] == 1


async def test_c4_high_water_mark_with_gaps(topic: Topic) -> None:
    producer = await connect(topic, "p1")
    results = [await publish(topic, producer, seq) for seq in (2, 3, 5, 2, 4, 6)]
    assert [r is not None for r in results] == [True, True, True, False, False, True]
    assert [first for _, first, _ in log_of(topic)] == [2, 3, 5, 6]


async def test_gapped_cpp_batch_is_judged_by_its_real_last_id(topic: Topic) -> None:
    """R8 with a C++ batch of ids 2, 4, 6 after 5 was stored: first + n - 1 = 4 would call it
    a duplicate and lose 6; the per-message ids inside the batch say it reaches 6, so it is
    stored (whole)."""
    producer = await connect(topic, "p1")
    await publish(topic, producer, 0, 6)
    data = entry("p1", 2, ids=[2, 4, 6])
    assert exact_batch_highest_sequence_id(data, 4) == 6
    assert await topic.publish(producer, 2, 4, data) is not None
    assert topic.last_sequence_id("p1") == 6
    assert dedup_stats(topic)["straddlingBatchesStored"] == 1


def test_exact_highest_id_falls_back_to_the_estimate() -> None:
    assert exact_batch_highest_sequence_id(entry("p", 3), 3) == 3  # not a batch
    assert exact_batch_highest_sequence_id(entry("p", 3, ids=[3, 1]), 4) == 4  # goes backwards
    compressed = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=2,
        compression=pb.CompressionType.LZ4,
    )
    assert exact_batch_highest_sequence_id(encode_entry(compressed, b"\x00garbage"), 1) == 1
    unparsable = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2
    )
    assert exact_batch_highest_sequence_id(encode_entry(unparsable, b"\xff" * 9), 1) == 1


async def test_failed_write_fails_staged_entries_and_refuses_the_producer(tmp_path: Path) -> None:
    """D7 / Pulsar #5218 end to end on the ledger: the group that failed and everything staged
    behind it are failed; the producer is refused until it reconnects; the resend is stored."""
    layer = FaultyLayer()
    topic = await open_topic(tmp_path / "t", config(), layer=layer)
    try:
        p1, p2 = await connect(topic, "p1"), await connect(topic, "p2")
        await publish(topic, p1, 0)
        layer.fail("fdatasync", errno.EIO, suffix=".seg")
        failing = [topic.publish(p1, 1, 1, entry("p1", 1)), topic.publish(p2, 0, 0, entry("p2", 0))]
        results = await asyncio.gather(*failing, return_exceptions=True)
        assert all(isinstance(r, PersistenceError) for r in results)
        with pytest.raises(PersistenceError, match="earlier message"):
            topic.publish(p1, 2, 2, entry("p1", 2))  # pipelined behind the failure: refused
        assert topic.dedup is not None
        assert dict(topic.dedup.highest_pushed) == {"p1": 0}  # pushed := persisted

        await topic.remove_producer(p1)
        await topic.remove_producer(p2)
        p1, p2 = await connect(topic, "p1"), await connect(topic, "p2")
        assert await publish(topic, p1, 1) is not None  # the resend is stored, not a dup
        assert await publish(topic, p1, 2) is not None
        assert await publish(topic, p2, 0) is not None
        assert log_of(topic) == [("p1", 0, 1), ("p1", 1, 1), ("p1", 2, 1), ("p2", 0, 1)]
        assert dedup_stats(topic)["writeFailures"] == 1
    finally:
        await topic.close()


async def test_group_durable_before_a_failed_roll_is_completed(tmp_path: Path) -> None:
    """A group spanning a segment roll: its first part is written to the full segment, then the
    new segment fails. The durable part is in the log and must be receipted, not failed (the
    client would resend it and it would be stored twice); only the rest fails."""
    layer = FaultyLayer()
    topic = await open_topic(tmp_path / "t", config(), layer=layer)
    try:
        producer = await connect(topic, "p1")
        for seq in range(5):
            await publish(topic, producer, seq)
        first_segment = sorted((tmp_path / "t").glob("*.seg"))[-1].name
        next_segment = f"{int(first_segment.removesuffix('.seg')) + 1:020d}.seg"
        layer.fail("fdatasync", errno.EIO, suffix=next_segment)
        group = [topic.publish(producer, s, s, entry("p1", s)) for s in range(5, 10)]
        results = await asyncio.gather(*group, return_exceptions=True)
        # Entries 5 and 6 fill the first segment (7 entries per segment); 7..9 fail.
        assert [isinstance(r, Position) for r in results] == [True, True, False, False, False]
        assert topic.last_sequence_id("p1") == 6
        await topic.remove_producer(producer)
        producer = await connect(topic, "p1")
        for seq in range(5, 10):  # the client resends what failed (and what it never heard of)
            await publish(topic, producer, seq)
        assert [first for _, first, _ in log_of(topic)] == list(range(10))
    finally:
        await topic.close()


async def test_enospc_on_write_keeps_serving(tmp_path: Path) -> None:
    layer = FaultyLayer()
    topic = await open_topic(tmp_path / "t", config(), layer=layer)
    try:
        producer = await connect(topic, "p1")
        layer.fail("pwrite", errno.ENOSPC, suffix=".seg")
        with pytest.raises(PersistenceError, match="No space"):
            await publish(topic, producer, 0)
        await topic.remove_producer(producer)
        producer = await connect(topic, "p1")
        assert await publish(topic, producer, 0) is not None
        assert log_of(topic) == [("p1", 0, 1)]
    finally:
        await topic.close()


# --------------------------------------------------------------------------- snapshots


async def test_snapshot_every_entries_interval(topic: Topic) -> None:
    producer = await connect(topic, "p1")
    cursor = topic.ledger.cursors[DEDUP_CURSOR]
    for seq in range(2):
        await publish(topic, producer, seq)
    assert cursor.properties == {}
    last = await publish(topic, producer, 2)  # the third persisted entry (interval 3)
    assert cursor.mark_delete_position == last
    assert cursor.properties == {"p1": 2}
    stats = dedup_stats(topic)
    assert stats["lastSnapshotPosition"] == f"{last.ledger_id}:{last.entry_id}"
    assert stats["lastSnapshotTime"] is not None
    assert stats["entriesSinceSnapshot"] == 0


async def test_t1_time_based_snapshot_honours_its_frequency(tmp_path: Path) -> None:
    """T1: entries interval far away, interval 1 s: the periodic task (frequency 1 s) takes a
    snapshot once the interval passed; with frequency 0 the mark-delete lags behind."""
    for frequency, expect_snapshot in ((1, True), (0, False)):
        clock = FakeClock()
        broker_config = config(
            broker_deduplication_entries_interval=20_000,
            broker_deduplication_snapshot_interval_seconds=1,
            broker_deduplication_snapshot_frequency_in_seconds=frequency,
        )
        topic = await open_topic(tmp_path / f"t{frequency}", broker_config, clock=clock)
        try:
            producer = await connect(topic, "p1")
            last = None
            for seq in range(50):
                last = await publish(topic, producer, seq)
            clock.now += 2.0
            await asyncio.sleep(0.3)  # a few housekeeping ticks
            cursor = topic.ledger.cursors[DEDUP_CURSOR]
            assert (cursor.mark_delete_position == last) is expect_snapshot
            assert (cursor.properties == {"p1": 49}) is expect_snapshot
        finally:
            await topic.close()


async def test_clean_close_snapshots_so_nothing_is_replayed(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config(broker_deduplication_entries_interval=1000))
    producer = await connect(topic, "p1")
    for seq in range(5):
        await publish(topic, producer, seq)
    await topic.close()
    topic = await open_topic(tmp_path / "t", config())
    try:
        assert topic.dedup is not None
        assert topic.dedup.stats()["replayed_entries"] == 0
        assert topic.last_sequence_id("p1") == 4
    finally:
        await topic.close()


async def test_c2_recovery_after_a_crash_replays_past_the_snapshot(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config())
    producer = await connect(topic, "p1")
    for seq in range(10):
        await publish(topic, producer, seq)
    await asyncio.to_thread(topic._persist_cursors, 1e9)
    await publish(topic, producer, 10, 3)
    await topic.abandon()
    topic = await open_topic(tmp_path / "t", config())
    try:
        assert topic.last_sequence_id("p1") == 12
        assert topic.dedup is not None
        assert topic.dedup.stats()["replayed_entries"] == 2  # 9 was the last snapshot
    finally:
        await topic.close()


async def test_snapshot_keeps_only_max_number_of_producers(tmp_path: Path) -> None:
    """brokerDeduplicationMaxNumberOfProducers bounds the snapshot: the most recently active
    names survive a clean restart, older ones are forgotten (as in Java)."""
    broker_config = config(
        broker_deduplication_max_number_of_producers=3,
        broker_deduplication_entries_interval=1000,
    )
    topic = await open_topic(tmp_path / "t", broker_config)
    for index in range(5):
        producer = await connect(topic, f"p{index}")
        await publish(topic, producer, 10 + index)
    await topic.close()
    topic = await open_topic(tmp_path / "t", broker_config)
    try:
        assert topic.ledger.cursors[DEDUP_CURSOR].properties == {"p2": 12, "p3": 13, "p4": 14}
        assert [topic.last_sequence_id(f"p{i}") for i in range(5)] == [-1, -1, 12, 13, 14]
    finally:
        await topic.close()


async def test_d8_inactive_producers_are_purged_by_housekeeping(tmp_path: Path) -> None:
    """Only names idle for longer than brokerDeduplicationProducerInactivityTimeoutMinutes go;
    connected ones and recently disconnected ones stay."""
    clock = FakeClock()
    broker_config = config(broker_deduplication_producer_inactivity_timeout_minutes=1)
    topic = await open_topic(tmp_path / "t", broker_config, clock=clock)
    try:
        names = ("gone", "late", "staying")
        producers = {name: await connect(topic, name) for name in names}
        for producer in producers.values():
            await publish(topic, producer, 0)
        await topic.remove_producer(producers["gone"])
        clock.now += 50.0
        await topic.remove_producer(producers["late"])
        clock.now += 11.0  # gone: idle 61 s; late: idle 11 s
        await asyncio.sleep(0.3)  # a few housekeeping ticks
        assert [topic.last_sequence_id(name) for name in names] == [-1, 0, 0]
        assert dedup_stats(topic)["purgedProducers"] == 1
    finally:
        await topic.close()


async def test_concurrent_loads_recover_once(tmp_path: Path) -> None:
    """Pulsar #25954: two lookups racing for an unloaded topic must not replay twice (two dedup
    states, each accepting what the other stored). The broker loads a topic once per name."""
    broker_config = replace(
        config(), data_dir=str(tmp_path / "data"), broker_deduplication_entries_interval=1000
    )
    service = BrokerService(broker_config)
    topic = await service.get_topic(TOPIC, create=True)
    producer = await connect(topic, "p1")
    for seq in range(5):
        await publish(topic, producer, seq)
    await topic.abandon()  # a crash: the next load replays the 5 entries
    service.topics.clear()
    loads = await asyncio.gather(*(service.get_topic(TOPIC, create=False) for _ in range(8)))
    try:
        assert all(loaded is loads[0] for loaded in loads)
        assert loads[0].dedup is not None
        assert loads[0].dedup.stats()["replayed_entries"] == 5
        assert loads[0].last_sequence_id("p1") == 4
    finally:
        await service.close_topics()


# --------------------------------------------------------------------------- enable / disable


async def test_t2_t3_disable_clears_state_and_deletes_the_cursor(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config())
    try:
        producer = await connect(topic, "p1")
        for seq in range(4):
            await publish(topic, producer, seq)
        await topic.set_dedup_enabled(False)
        assert DEDUP_CURSOR not in topic.ledger.cursors
        assert not list((topic.ledger.directory / "cursors").glob("*dedup*"))
        assert topic.last_sequence_id("p1") == -1
        assert await publish(topic, producer, 0) is not None  # no dedup: stored again
        topic.publisher.maybe_snapshot_dedup_by_time()  # T3: the periodic task is a no-op
        assert dedup_stats(topic) == {"enabled": False}

        await topic.set_dedup_enabled(True)
        assert topic.last_sequence_id("p1") == -1  # starts afresh
        assert await publish(topic, producer, 1) is not None
        assert await publish(topic, producer, 1) is None
    finally:
        await topic.close()
    reopened = await open_topic(tmp_path / "t", config())
    try:
        # Only what was written after re-enabling is replayed.
        assert reopened.dedup is not None
        assert reopened.last_sequence_id("p1") == 1
    finally:
        await reopened.close()


async def test_recovery_ignores_a_snapshot_ahead_of_the_log(tmp_path: Path) -> None:
    """A dedup cursor pulled back by the storage (the log lost durable entries) describes
    entries that no longer exist: recovery replays the whole log instead."""
    directory = tmp_path / "t"
    ledger = await asyncio.to_thread(Ledger.open, directory, LEDGER_CONFIG)
    cursor = ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Latest)
    first = ledger.append(entry("p1", 0))
    ledger.append(entry("p1", 1))
    ledger.flush()
    cursor.mark_delete(Position(first.ledger_id, first.entry_id + 1), properties={"p1": 99})
    cursor.persist()
    await asyncio.to_thread(ledger._abandon)  # a crash: the segment stays unsealed
    segment = next(directory.glob("*.seg"))
    segment.write_bytes(segment.read_bytes()[:-10])  # lose the tail: the mark is now too far
    ledger = await asyncio.to_thread(Ledger.open, directory, LEDGER_CONFIG)
    try:
        assert ledger.cursors[DEDUP_CURSOR].was_clamped
        dedup = recover_dedup(ledger, dedup_config_from(config()), now=0.0)
        assert dict(dedup.highest_persisted) == {"p1": 0}
    finally:
        await asyncio.to_thread(ledger.close)


# --------------------------------------------------------------------------- property test

NAMES = ("a", "b")


@dataclass
class ModelProducer:
    """A client-side producer: sequential ids, resends what is not acknowledged, in order."""

    name: str
    next_seq: int = 0
    sent: list[tuple[int, int]] = field(default_factory=list)  # (first, count), in order
    acked: set[tuple[int, int]] = field(default_factory=set)
    in_flight: dict[tuple[int, int], asyncio.Future[Position | None]] = field(default_factory=dict)
    handle: Producer | None = None
    broken: bool = False  # saw an error: must reconnect and resend before sending more


@dataclass(frozen=True)
class Step:
    kind: str  # send | settle | fail | persist | reconnect | crash | restart
    name: str = "a"
    count: int = 1
    error: int = errno.EIO
    operation: str = "fdatasync"


# Sends dominate, as in real traffic; sampled_from weights by repetition.
_KINDS = ["send"] * 8 + ["settle"] * 3 + ["fail", "persist", "reconnect", "crash", "restart"]
_steps = st.builds(
    Step,
    kind=st.sampled_from(_KINDS),
    name=st.sampled_from(NAMES),
    count=st.integers(1, 4),
    error=st.sampled_from([errno.EIO, errno.ENOSPC]),
    operation=st.sampled_from(["pwrite", "fdatasync"]),
)


def _consume_outcome(future: asyncio.Future[Position | None]) -> None:
    if not future.cancelled():
        future.exception()


class Harness:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.layer = FaultyLayer()
        self.config = config()
        self.producers = {name: ModelProducer(name) for name in NAMES}
        self.topic: Topic | None = None
        self.recoveries = 0

    async def open(self) -> None:
        self.topic = await open_topic(self.directory, self.config, layer=self.layer)
        self.recoveries += 1
        # Recovery equals the model built from the log itself.
        assert self.topic.dedup is not None
        assert self.topic.dedup.state is DedupState.READY
        model = model_of(log_of(self.topic))
        assert dict(self.topic.dedup.highest_persisted) == model
        assert dict(self.topic.dedup.highest_pushed) == model
        for producer in self.producers.values():
            producer.handle = None

    async def ensure_connected(self, producer: ModelProducer) -> Producer:
        assert self.topic is not None
        if producer.handle is None or producer.broken:
            if producer.handle is not None:
                await self.topic.remove_producer(producer.handle)
            producer.handle = await connect(self.topic, producer.name)
            producer.broken = False
            # What the client does on reconnect: resend everything not acknowledged, in order.
            for batch in producer.sent:
                if batch not in producer.acked:
                    self.send(producer, batch)
        return producer.handle

    def send(self, producer: ModelProducer, batch: tuple[int, int]) -> None:
        assert self.topic is not None
        assert producer.handle is not None
        if producer.broken:
            return
        first, count = batch
        try:
            future = self.topic.publish(
                producer.handle, first, first + count - 1, entry(producer.name, first, count)
            )
        except PersistenceError:
            producer.broken = True  # SEND_ERROR: the client closes and resends later
            return
        previous = producer.in_flight.pop(batch, None)
        if previous is not None:  # superseded by the resend: nobody will await it
            previous.add_done_callback(_consume_outcome)
        producer.in_flight[batch] = future

    async def settle(self) -> None:
        """Let the group commit run and collect the answers."""
        for producer in self.producers.values():
            for batch, future in list(producer.in_flight.items()):
                try:
                    await asyncio.wait_for(asyncio.shield(future), 5)
                except PersistenceError:
                    producer.broken = True
                else:
                    producer.acked.add(batch)
                del producer.in_flight[batch]

    async def step(self, step: Step) -> None:
        assert self.topic is not None
        if step.kind == "send":
            producer = self.producers[step.name]
            await self.ensure_connected(producer)
            batch = (producer.next_seq, step.count)
            producer.next_seq += step.count
            producer.sent.append(batch)
            self.send(producer, batch)
        elif step.kind == "settle":
            await self.settle()
        elif step.kind == "fail":
            self.layer.fail(step.operation, step.error, suffix=".seg")
        elif step.kind == "persist":
            await asyncio.to_thread(self.topic._persist_cursors, 1e12)
        elif step.kind == "reconnect":
            self.producers[step.name].broken = True
            await self.ensure_connected(self.producers[step.name])
        elif step.kind in ("crash", "restart"):
            if step.kind == "crash":
                await self.topic.abandon()
            else:
                await self.settle()
                await self.topic.close()
            for producer in self.producers.values():
                for future in producer.in_flight.values():
                    future.add_done_callback(_consume_outcome)
                producer.in_flight.clear()  # answers that never came
            self.layer = FaultyLayer()  # a failure armed before the crash does not carry over
            await self.open()

    async def finish(self) -> None:
        """Retry until every message is acknowledged, then check the log and a last recovery."""
        for _ in range(20):
            await self.settle()
            pending = [p for p in self.producers.values() if len(p.acked) < len(p.sent)]
            if not pending:
                break
            for producer in pending:
                producer.broken = True
                await self.ensure_connected(producer)
        assert self.topic is not None
        log = log_of(self.topic)
        event(f"recoveries: {min(self.recoveries, 4)}+")
        event(f"write failures this load: {min(self.topic.stats.persistence_errors, 2)}")
        event(f"entries: {min(len(log) // 10 * 10, 30)}+")
        event(f"sent: {min(sum(len(p.sent) for p in self.producers.values()) // 10 * 10, 30)}+")
        for producer in self.producers.values():
            assert producer.acked == set(producer.sent)
            stored = [(first, count) for name, first, count in log if name == producer.name]
            assert stored == producer.sent  # every message once, in order: no loss, no dup
        await self.topic.abandon()
        await self.open()
        assert self.topic is not None
        await self.topic.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps=st.lists(_steps, min_size=20, max_size=80))
async def test_recovery_equals_the_model(steps: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(Path(tmp) / "topic")
        await harness.open()
        try:
            for step in steps:
                await harness.step(step)
            await harness.finish()
        finally:
            if harness.topic is not None:
                await harness.topic.abandon()
