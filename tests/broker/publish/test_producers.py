"""Tests of ``broker.publish.producers.ProducerRegistry``: carrying PIP-68 decisions out over a
real ledger.

The state machine itself is tested in ``test_producer_access.py``; here the questions are about
I/O and ordering: the topic epoch is on disk before a producer is told it holds the topic, the
stored epoch never goes down, a grant that cannot be persisted is undone, a producer that loses
the topic while its grant is being persisted is never told it holds it, a promotion survives the
cancellation of whoever triggered it, and a new holder is granted only once earlier writes are
durable.  The ledger is real (files in ``tmp_path``); a file layer holds or fails the write of
``ledger.meta`` (where the properties live) so the interleavings are deterministic.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.errors import BrokerError, PersistenceError, ProducerBusy, ProducerFenced
from broker.publish.producers import TOPIC_EPOCH_PROPERTY, Producer, ProducerRegistry
from broker.publish.write_barrier import WriteBarrier
from broker.storage import Ledger, LedgerConfig, OsFileLayer
from broker.storage.ledger_meta_file import METADATA_FILE_NAME
from protocol.enums import ProducerAccessMode

SHARED = ProducerAccessMode.Shared
EXCLUSIVE = ProducerAccessMode.Exclusive
WAIT = ProducerAccessMode.WaitForExclusive
FENCING = ProducerAccessMode.ExclusiveWithFencing


class MetaGate(OsFileLayer):
    """Real files; the next rename that publishes ``ledger.meta`` waits for ``release``
    (``hold``) or fails (``fail_next``).  Later writes go through."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self._release = threading.Event()
        self._hold_next = False
        self._failures = 0
        self.meta_writes = 0

    def hold(self) -> None:
        self.held.clear()
        self._release.clear()
        self._hold_next = True

    def release(self) -> None:
        self._release.set()

    def fail_next(self, count: int = 1) -> None:
        self._failures = count

    def replace(self, src: Path, dst: Path) -> None:
        if dst.name == METADATA_FILE_NAME:
            if self._failures:
                self._failures -= 1
                raise OSError(28, "No space left on device (injected)")
            if self._hold_next:
                self._hold_next = False
                self.held.set()
                if not self._release.wait(10):
                    raise TimeoutError("test never released the meta write")
            self.meta_writes += 1
        super().replace(src, dst)

    async def wait_held(self) -> None:
        assert await asyncio.to_thread(self.held.wait, 10), "no ledger.meta write happened"


class RecordingSink:
    """The connection side of a producer: records what the registry tells it."""

    def __init__(self, *, alive: bool = True) -> None:
        self.alive = alive
        self.closed: list[str] = []
        self.ready: list[tuple[str, int | None]] = []
        self.failed: list[tuple[str, type[BrokerError]]] = []
        self.pings = 0

    def close_producer(self, producer: Producer) -> None:
        self.closed.append(producer.name)

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        self.ready.append((producer.name, topic_epoch))

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        self.failed.append((producer.name, type(error)))

    async def check_alive(self) -> bool:
        self.pings += 1
        return self.alive


@pytest.fixture
def gate() -> MetaGate:
    return MetaGate()


@pytest.fixture
def ledger(tmp_path: Path, gate: MetaGate) -> Iterator[Ledger]:
    opened = Ledger.open(tmp_path / "topic", LedgerConfig(), file_layer=gate)
    try:
        yield opened
    finally:
        gate.release()
        opened.close()


def producer(name: str, mode: ProducerAccessMode, sink: RecordingSink | None = None) -> Producer:
    sink = sink or RecordingSink()
    return Producer(
        producer_id=0, name=name, mode=mode, sink=sink, connection_key=sink, request_id=1
    )


def sink_of(p: Producer) -> RecordingSink:
    assert isinstance(p.sink, RecordingSink)
    return p.sink


def stored_epoch(tmp_path: Path) -> int | None:
    """The epoch as a fresh open of the (closed) ledger directory reads it from disk."""
    reopened = Ledger.open(tmp_path / "topic", LedgerConfig())
    try:
        return reopened.properties.get(TOPIC_EPOCH_PROPERTY)
    finally:
        reopened.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# ------------------------------------------------------------------------ epoch before grant


@pytest.mark.parametrize("mode", [EXCLUSIVE, WAIT, FENCING])
async def test_epoch_is_on_disk_before_the_producer_is_admitted(
    ledger: Ledger, gate: MetaGate, tmp_path: Path, mode: ProducerAccessMode
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    p1 = producer("p1", mode)
    gate.hold()
    admit = asyncio.create_task(registry.add(p1, None))
    await gate.wait_held()
    await settle()
    assert not admit.done()
    assert not p1.ready
    assert registry.durable_epoch is None
    gate.release()
    assert await admit is True
    assert p1.ready
    assert p1.topic_epoch == 0
    assert registry.durable_epoch == 0
    ledger.close()
    assert stored_epoch(tmp_path) == 0


async def test_promotion_is_told_only_after_its_epoch_is_on_disk(
    ledger: Ledger, gate: MetaGate
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    holder, waiter = producer("holder", EXCLUSIVE), producer("waiter", WAIT)
    assert await registry.add(holder, None)
    assert await registry.add(waiter, None) is False
    registry.producer_queued(waiter)
    gate.hold()
    remove = asyncio.create_task(registry.remove(holder))
    await gate.wait_held()
    await settle()
    assert sink_of(waiter).ready == []
    gate.release()
    await remove
    assert sink_of(waiter).ready == [("waiter", 1)]
    assert waiter.ready
    assert registry.durable_epoch == 1


async def test_stored_epoch_is_read_back_and_lets_the_previous_holder_reclaim(
    tmp_path: Path,
) -> None:
    first = Ledger.open(tmp_path / "topic", LedgerConfig())
    registry = ProducerRegistry(first, WriteBarrier())
    assert await registry.add(producer("old", EXCLUSIVE), None)
    assert await registry.add(producer("new", FENCING), None)
    first.close()

    counting = MetaGate()
    reopened = Ledger.open(tmp_path / "topic", LedgerConfig(), file_layer=counting)
    try:
        restored = ProducerRegistry(reopened, WriteBarrier())
        assert restored.access.topic_epoch == 1
        assert restored.durable_epoch == 1
        # The fenced producer comes back with the epoch it was given: refused for good.
        with pytest.raises(ProducerFenced, match="epoch has already moved"):
            await restored.add(producer("old", EXCLUSIVE), 0)
        # The last holder reclaims with its epoch; no write is needed for an unchanged epoch.
        newest = producer("new", FENCING)
        writes_before = counting.meta_writes
        assert await restored.add(newest, 1)
        assert newest.topic_epoch == 1
        assert counting.meta_writes == writes_before
    finally:
        reopened.close()


# ------------------------------------------------------------------------ concurrent grants


async def test_concurrent_grants_never_lower_the_stored_epoch(
    ledger: Ledger, gate: MetaGate, tmp_path: Path
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    slow, fencer = producer("slow", EXCLUSIVE), producer("fencer", FENCING)
    gate.hold()
    slow_admit = asyncio.create_task(registry.add(slow, None))
    await gate.wait_held()  # epoch 0 is being written
    fencer_admit = asyncio.create_task(registry.add(fencer, None))
    await settle()
    # The fencer took the topic (epoch 1) while the slow grant was still on its way to disk.
    assert registry.access.holder is fencer
    assert sink_of(slow).closed == ["slow"]
    gate.release()
    with pytest.raises(ProducerFenced):
        await slow_admit
    assert await fencer_admit is True
    assert not slow.ready
    assert fencer.ready
    assert fencer.topic_epoch == 1
    assert registry.producers == {fencer}
    ledger.close()
    assert stored_epoch(tmp_path) == 1


async def test_a_grant_persisted_late_never_overwrites_a_higher_epoch(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lower epoch is decided first but reaches the disk last: the slow grant waits for an
    earlier write to become durable, and meanwhile a fencer takes over with nothing to wait for."""
    writes = WriteBarrier()
    registry = ProducerRegistry(ledger, writes)
    ledger.append(b"earlier")
    writes.accepted()
    slow, fencer = producer("slow", EXCLUSIVE), producer("fencer", FENCING)
    slow_admit = asyncio.create_task(registry.add(slow, None))
    await settle()  # epoch 0 decided; now waiting for the earlier write
    await asyncio.to_thread(ledger.flush)
    # The fencer asks before the group commit settles the earlier write, and waits for it
    # too; the settle then wakes both grants, and the slow one's lower epoch must not win.
    fencer_admit = asyncio.create_task(registry.add(fencer, None))
    await settle()
    writes.settled(1)
    assert await fencer_admit  # epoch 1
    with pytest.raises(ProducerFenced):
        await slow_admit
    assert registry.durable_epoch == 1
    ledger.close()
    assert stored_epoch(tmp_path) == 1


async def test_producer_removed_while_its_grant_is_persisted_is_not_admitted(
    ledger: Ledger, gate: MetaGate
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    p1 = producer("p1", EXCLUSIVE)
    gate.hold()
    admit = asyncio.create_task(registry.add(p1, None))
    await gate.wait_held()
    await registry.remove(p1)  # the client closed, or its connection dropped
    gate.release()
    with pytest.raises(ProducerFenced):
        await admit
    assert not p1.ready
    assert registry.access.holder is None
    assert registry.producers == set()
    assert await registry.add(producer("p2", EXCLUSIVE), None)


async def test_cancelled_grant_is_withdrawn(ledger: Ledger, gate: MetaGate) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    p1 = producer("p1", EXCLUSIVE)
    gate.hold()
    admit = asyncio.create_task(registry.add(p1, None))
    await gate.wait_held()
    admit.cancel()
    gate.release()
    with pytest.raises(asyncio.CancelledError):
        await admit
    assert registry.access.holder is None
    assert registry.producers == set()


async def test_promotion_survives_cancellation_of_the_remover(
    ledger: Ledger, gate: MetaGate
) -> None:
    """The old holder's connection closes right after its CLOSE_PRODUCER: the task running the
    removal is cancelled half-way through the promotion, which must still complete."""
    registry = ProducerRegistry(ledger, WriteBarrier())
    holder, waiter = producer("holder", EXCLUSIVE), producer("waiter", WAIT)
    assert await registry.add(holder, None)
    assert await registry.add(waiter, None) is False
    gate.hold()
    remove = asyncio.create_task(registry.remove(holder))
    await gate.wait_held()
    remove.cancel()
    gate.release()
    with pytest.raises(asyncio.CancelledError):
        await remove
    for _ in range(100):
        if sink_of(waiter).ready:
            break
        await asyncio.sleep(0.01)
    assert sink_of(waiter).ready == [("waiter", 1)]
    assert registry.access.holder is waiter
    assert registry.access.may_publish(waiter)


# ------------------------------------------------------------------------ persistence failures


@pytest.mark.parametrize("mode", [EXCLUSIVE, WAIT, FENCING])
async def test_failed_epoch_write_withdraws_the_producer(
    ledger: Ledger, gate: MetaGate, tmp_path: Path, mode: ProducerAccessMode
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    p1 = producer("p1", mode)
    gate.fail_next()
    with pytest.raises(PersistenceError, match="topic epoch"):
        await registry.add(p1, None)
    assert not p1.ready
    assert registry.access.holder is None
    assert registry.producers == set()
    assert registry.durable_epoch is None
    # The topic is free again and the next grant is persisted normally.
    p2 = producer("p2", mode)
    assert await registry.add(p2, None)
    assert registry.durable_epoch == p2.topic_epoch
    ledger.close()
    assert stored_epoch(tmp_path) == p2.topic_epoch


async def test_failed_fencing_grant_still_fences_the_old_holder(
    ledger: Ledger, gate: MetaGate
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    old, waiter, fencer = producer("old", EXCLUSIVE), producer("w", WAIT), producer("f", FENCING)
    assert await registry.add(old, None)
    assert await registry.add(waiter, None) is False
    registry.producer_queued(waiter)
    gate.fail_next()
    with pytest.raises(PersistenceError):
        await registry.add(fencer, None)
    # The fencing decision stands: the old holder and the waiter were told, nobody holds it.
    assert sink_of(old).closed == ["old"]
    assert sink_of(waiter).failed == [("w", ProducerFenced)]
    assert not registry.may_publish(old)
    assert registry.access.holder is None
    assert registry.producers == set()


async def test_failed_promotion_moves_on_to_the_next_waiter(ledger: Ledger, gate: MetaGate) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    holder, w1, w2 = producer("holder", EXCLUSIVE), producer("w1", WAIT), producer("w2", WAIT)
    assert await registry.add(holder, None)
    for waiter in (w1, w2):
        assert await registry.add(waiter, None) is False
        registry.producer_queued(waiter)
    gate.fail_next()
    await registry.remove(holder)
    assert sink_of(w1).failed == [("w1", PersistenceError)]
    assert sink_of(w2).ready == [("w2", 2)]
    assert registry.access.holder is w2
    assert registry.durable_epoch == 2
    assert registry.producers == {w2}


# ------------------------------------------------------------------------ earlier writes


async def test_new_holder_waits_until_earlier_writes_are_durable(ledger: Ledger) -> None:
    writes = WriteBarrier()
    registry = ProducerRegistry(ledger, writes)
    for i in range(3):
        ledger.append(f"earlier-{i}".encode())
    writes.accepted(4)  # three appended, one still staged by the topic
    assert ledger.last_confirmed_position is None
    p1 = producer("p1", EXCLUSIVE)
    admit = asyncio.create_task(registry.add(p1, None))
    await asyncio.sleep(0.05)
    assert not admit.done()
    await asyncio.to_thread(ledger.flush)  # the topic's group commit
    writes.settled(3)
    await asyncio.sleep(0.05)
    assert not admit.done()  # the staged write is not settled yet
    ledger.append(b"staged")
    await asyncio.to_thread(ledger.flush)
    writes.settled(1)
    assert await asyncio.wait_for(admit, 5) is True
    assert ledger.last_confirmed_position == ledger.last_position


async def test_shared_producers_do_not_wait_for_earlier_writes(ledger: Ledger) -> None:
    writes = WriteBarrier()
    registry = ProducerRegistry(ledger, writes)
    ledger.append(b"pending")
    writes.accepted()
    assert await asyncio.wait_for(registry.add(producer("s", SHARED), None), 1) is True
    assert ledger.last_confirmed_position is None


class FailingEntryWrites(OsFileLayer):
    """Fails every write carrying ``poison``: the entry records, never the metadata file or the
    zero-fill of pre-allocation."""

    def __init__(self, poison: bytes) -> None:
        self.poison = poison

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.poison in bytes(data):
            raise OSError(5, "Input/output error (injected)")
        return super().pwrite(fd, data, offset)


async def test_writes_dropped_by_a_failed_flush_do_not_block_the_grant(tmp_path: Path) -> None:
    ledger = Ledger.open(
        tmp_path / "topic", LedgerConfig(), file_layer=FailingEntryWrites(b"doomed")
    )
    try:
        writes = WriteBarrier()
        registry = ProducerRegistry(ledger, writes)
        ledger.append(b"doomed")
        writes.accepted()
        p1 = producer("p1", EXCLUSIVE)
        admit = asyncio.create_task(registry.add(p1, None))
        await asyncio.sleep(0.02)
        assert not admit.done()
        with pytest.raises(OSError):
            await asyncio.to_thread(ledger.flush)
        writes.settled(1)  # the topic fails the write back to its client: settled
        assert await asyncio.wait_for(admit, 5) is True
        assert ledger.last_confirmed_position is None  # nothing was stored, nothing waited on
    finally:
        ledger.close()


# ------------------------------------------------------------------------ same-name liveness


@pytest.mark.parametrize("mode", [SHARED, EXCLUSIVE, WAIT])
async def test_same_name_on_a_dead_connection_is_evicted(
    ledger: Ledger, mode: ProducerAccessMode
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    old = producer("app", mode, RecordingSink(alive=False))
    assert await registry.add(old, None)
    new = producer("app", mode)
    assert await registry.add(new, None)
    assert sink_of(old).pings == 1
    assert sink_of(old).closed == ["app"]
    assert registry.producers == {new}
    assert not registry.may_publish(old)


@pytest.mark.parametrize(
    ("mode", "error"), [(SHARED, ProducerBusy), (EXCLUSIVE, ProducerFenced), (WAIT, None)]
)
async def test_same_name_on_a_live_connection_is_kept(
    ledger: Ledger, mode: ProducerAccessMode, error: type[BrokerError] | None
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    old = producer("app", mode, RecordingSink(alive=True))
    assert await registry.add(old, None)
    new = producer("app", mode)
    if error is None:
        # WaitForExclusive: the live holder keeps the topic; the newcomer's name is taken.
        with pytest.raises(ProducerBusy):
            await registry.add(new, None)
    else:
        with pytest.raises(error):
            await registry.add(new, None)
    assert sink_of(old).pings == 1
    assert sink_of(old).closed == []
    assert registry.may_publish(old)


# ------------------------------------------------------------------------ admin, fencing, stats


async def test_increment_epoch_fences_the_holder_and_persists(
    ledger: Ledger, tmp_path: Path
) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    holder = producer("holder", EXCLUSIVE)
    assert await registry.add(holder, None)
    assert await registry.increment_epoch() == 1
    assert sink_of(holder).closed == ["holder"]
    assert holder.fenced
    assert not registry.may_publish(holder)
    with pytest.raises(ProducerFenced, match="epoch has already moved"):
        await registry.add(producer("holder", EXCLUSIVE), 0)
    ledger.close()
    assert stored_epoch(tmp_path) == 1


async def test_fencing_fails_waiters_and_forgets_them(ledger: Ledger) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    holder, w1, w2 = producer("holder", EXCLUSIVE), producer("w1", WAIT), producer("w2", WAIT)
    assert await registry.add(holder, None)
    for waiter in (w1, w2):
        assert await registry.add(waiter, None) is False
        registry.producer_queued(waiter)
    fencer = producer("fencer", FENCING)
    assert await registry.add(fencer, None)
    assert sink_of(holder).closed == ["holder"]
    assert sink_of(w1).failed == [("w1", ProducerFenced)]
    assert sink_of(w2).failed == [("w2", ProducerFenced)]
    assert registry.producers == {fencer}
    assert fencer.topic_epoch == 1


async def test_stats_show_epoch_holder_and_waiters(ledger: Ledger) -> None:
    registry = ProducerRegistry(ledger, WriteBarrier())
    assert registry.stats() == {
        "topicEpoch": None,
        "durableTopicEpoch": None,
        "exclusiveHolder": None,
        "exclusiveHolderMode": None,
        "waitingProducers": [],
        "sharedProducers": 0,
        "fencedProducers": 0,
    }
    assert await registry.add(producer("holder", WAIT), None)
    for name in ("w1", "w2"):
        assert await registry.add(producer(name, WAIT), None) is False
    stats = registry.stats()
    assert stats["topicEpoch"] == 0
    assert stats["durableTopicEpoch"] == 0
    assert stats["exclusiveHolder"] == "holder"
    assert stats["exclusiveHolderMode"] == "WaitForExclusive"
    assert stats["waitingProducers"] == ["w1", "w2"]
