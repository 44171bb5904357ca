"""Property test: random ack patterns against a model of what is acknowledged (PIP-54, R9).

A hypothesis state machine drives one durable subscription over a real ledger (small segments,
so positions span ledgers) with individual, batch-index and cumulative acks, negative acks,
reconnects, publishes, clean restarts and crashes, with the batch-index flag on or off, Shared or
Exclusive, and a client that returns permits the C++ way (every index of a batch) or the Java
way (only the delivered ones). The model is the set of acknowledged indexes per entry.

Checked after every step, once the simulated clients have received everything and given their
permits back:

* every MESSAGE delivers exactly the entry's unacknowledged indexes (flag on) or all of them
  (flag off), never a fully acknowledged entry, and carries an ``ack_set`` whenever the entry is
  partially acknowledged;
* no stall: every entry with an unacknowledged index is in flight at a connected consumer, and
  each consumer's permits are back at their initial grant;
* accounting: a consumer's ``unacked_messages`` is the sum of the unacknowledged indexes of the
  entries it holds; the backlog counts the entries not fully acknowledged; the mark-delete sits
  at the end of the fully acknowledged prefix;
* after a crash, what comes back lies between the last persisted acks and all acks sent.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from broker.dispatch.consumer import Consumer
from broker.storage import LedgerConfig, Position
from protocol.enums import SubType
from tests.broker.dispatch.harness import FakeSink, Harness, clearing, indexes_of

INITIAL_PERMITS = 3
sizes = st.integers(min_value=1, max_value=130)
pick = st.integers(min_value=0, max_value=1_000)


class _Client:
    """One consumer plus what its client has already taken from the sink."""

    def __init__(self, consumer: Consumer, sink: FakeSink) -> None:
        self.consumer = consumer
        self.sink = sink
        self.seen = 0


class BatchAckMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="sub-props-"))
        self.next_consumer_id = 0
        self.clients: list[_Client] = []
        self.acked: dict[Position, set[int]] = {}
        self.persisted: dict[Position, set[int]] = {}
        self.holder: dict[Position, Consumer] = {}

    # ------------------------------------------------------------------ setup

    @initialize(
        flag=st.booleans(),
        exclusive=st.booleans(),
        cpp_client=st.booleans(),
        initial=st.lists(sizes, min_size=1, max_size=5),
    )
    def setup(self, flag: bool, exclusive: bool, cpp_client: bool, initial: list[int]) -> None:
        self.flag = flag
        self.sub_type = SubType.Exclusive if exclusive else SubType.Shared
        self.cpp_client = cpp_client
        config = LedgerConfig(preallocate_bytes=0, max_entries_per_ledger=3)
        self.world = Harness(self.tmp / "topic", batch_index_ack=flag, config=config)
        for position in self.world.publish(*initial):
            self.acked[position] = set()
        self.persisted = {p: set(a) for p, a in self.acked.items()}
        self._connect_all()

    def teardown(self) -> None:
        try:
            if hasattr(self, "world"):
                self.world.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _connect_all(self) -> None:
        count = 1 if self.sub_type == SubType.Exclusive else 2
        self.clients = [self._connect() for _ in range(count)]
        self._pump()

    def _connect(self) -> _Client:
        self.next_consumer_id += 1
        sink = FakeSink()
        consumer = Consumer(
            self.next_consumer_id,
            f"c{self.next_consumer_id}",
            sink,
            returns_permits_for_skipped=self.cpp_client,
        )
        self.world.sub.add_consumer(consumer, self.sub_type)
        self.world.sub.add_permits(consumer, INITIAL_PERMITS)
        return _Client(consumer, sink)

    # ------------------------------------------------------------------ the simulated clients

    def _pump(self) -> None:
        """Run dispatch; each client takes its messages and gives permits back, until quiet."""
        self.world.run()
        progress = True
        while progress:
            progress = False
            for client in self.clients:
                fresh = client.sink.sent[client.seen :]
                client.seen = len(client.sink.sent)
                for sent in fresh:
                    size = self.world.sizes[sent.position]
                    delivered = indexes_of(sent.ack_set, size)
                    self._check_delivery(sent.position, sent.ack_set, delivered)
                    self.holder[sent.position] = client.consumer
                    back = size if self.cpp_client else len(delivered)
                    self.world.sub.add_permits(client.consumer, back)
                    progress = True
            self.world.run()

    def _check_delivery(
        self, position: Position, words: list[int] | None, delivered: set[int]
    ) -> None:
        size = self.world.sizes[position]
        acked = self.acked[position]
        assert len(acked) < size, f"fully acknowledged {position} was delivered"
        assert position not in self.holder, f"{position} dispatched twice"
        if self.flag:
            assert delivered == set(range(size)) - acked, f"{position}: acked index redelivered"
            # (An ack that cleared nothing may leave an all-set ack_set: harmless, delivers all.)
            assert words is not None or not acked
        else:
            assert words is None
            assert delivered == set(range(size))

    # ------------------------------------------------------------------ model helpers

    def _entry(self, index: int) -> Position:
        ordered = sorted(self.acked)
        return ordered[index % len(ordered)]

    def _fully_ack(self, position: Position) -> None:
        self.acked[position] = set(range(self.world.sizes[position]))
        self.holder.pop(position, None)

    def _is_done(self, position: Position) -> bool:
        return len(self.acked[position]) == self.world.sizes[position]

    def _drop_holder(self, consumer: Consumer) -> None:
        for position in [p for p, c in self.holder.items() if c is consumer]:
            del self.holder[position]

    # ------------------------------------------------------------------ rules: acks

    @rule(index=pick, chosen=st.sets(st.integers(0, 129), max_size=12))
    def ack_indexes(self, index: int, chosen: set[int]) -> None:
        """A batch-index ack: the client sends the set with ``chosen`` cleared (possibly an
        older, less complete set than what the broker holds)."""
        position = self._entry(index)
        size = self.world.sizes[position]
        cleared = {i % size for i in chosen}
        if size == 1 or cleared == set(range(size)):
            self.world.sub.acknowledge(None, [(position, None)])
            self._fully_ack(position)
        else:
            self.world.sub.acknowledge(None, [(position, clearing(size, cleared))])
            if self.flag and cleared:
                self.acked[position] |= cleared
                if self._is_done(position):
                    self.holder.pop(position, None)
        self._pump()

    @rule(index=pick)
    def ack_entry(self, index: int) -> None:
        position = self._entry(index)
        self.world.sub.acknowledge(None, [(position, None)])
        self._fully_ack(position)
        self._pump()

    @precondition(lambda self: self.sub_type == SubType.Exclusive)
    @rule(index=pick, batch_index=st.integers(0, 129))
    def ack_cumulative(self, index: int, batch_index: int) -> None:
        position = self._entry(index)
        size = self.world.sizes[position]
        through = batch_index % size
        partial = size > 1 and through < size - 1
        words = clearing(size, range(through + 1)) if partial else None
        self.world.sub.acknowledge_cumulative(None, position, words)
        for earlier in [p for p in self.acked if p < position]:
            self._fully_ack(earlier)
        if not partial:
            self._fully_ack(position)
        elif self.flag:
            self.acked[position] |= set(range(through + 1))
        self._pump()

    # ------------------------------------------------------------------ rules: redelivery

    @rule(which=pick)
    def redeliver_all(self, which: int) -> None:
        client = self.clients[which % len(self.clients)]
        self._drop_holder(client.consumer)
        self.world.sub.redeliver(client.consumer, None)
        self._pump()

    @precondition(lambda self: self.sub_type == SubType.Shared)
    @rule(index=pick)
    def negative_ack(self, index: int) -> None:
        position = self._entry(index)
        owner = self.holder.pop(position, None)
        if owner is not None:
            self.world.sub.redeliver(owner, [position])
        self._pump()

    @rule(which=pick)
    def reconnect(self, which: int) -> None:
        slot = which % len(self.clients)
        leaving = self.clients[slot].consumer
        self._drop_holder(leaving)
        self.world.sub.remove_consumer(leaving)
        self.clients[slot] = self._connect()
        self._pump()

    @rule(size=sizes)
    def publish(self, size: int) -> None:
        (position,) = self.world.publish(size)
        self.acked[position] = set()
        self.persisted[position] = set()
        self._pump()

    # ------------------------------------------------------------------ rules: durability

    @rule()
    def persist(self) -> None:
        self.world.sub.cursor.persist()
        self.persisted = {p: set(a) for p, a in self.acked.items()}

    @rule()
    def restart(self) -> None:
        self.world.restart()
        self.persisted = {p: set(a) for p, a in self.acked.items()}
        self.holder.clear()
        self._connect_all()

    @rule()
    def crash(self) -> None:
        self.world.crash()
        cursor = self.world.sub.cursor
        for position, acked in self.acked.items():
            size = self.world.sizes[position]
            if cursor.is_deleted(position):
                recovered = set(range(size))
            else:
                held = cursor.batch_ack_set(position)
                recovered = set() if held is None else set(range(size)) - indexes_of(held, size)
            assert self.persisted[position] <= recovered, f"{position}: persisted ack lost"
            assert recovered <= acked, f"{position}: an ack nobody sent appeared"
            self.acked[position] = recovered
        self.persisted = {p: set(a) for p, a in self.acked.items()}
        self.holder.clear()
        self._connect_all()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def nothing_stalls(self) -> None:
        if not hasattr(self, "world"):
            return
        for position in self.acked:
            if not self._is_done(position):
                assert position in self.holder, f"{position} is waiting but not in flight"
        for client in self.clients:
            assert client.consumer.permits == INITIAL_PERMITS

    @invariant()
    def accounting_balances(self) -> None:
        if not hasattr(self, "world"):
            return
        for client in self.clients:
            expected = sum(
                self.world.sizes[p] - len(self.acked[p])
                for p, owner in self.holder.items()
                if owner is client.consumer
            )
            assert client.consumer.unacked_messages == expected
        assert self.world.sub.backlog() == sum(1 for p in self.acked if not self._is_done(p))

    @invariant()
    def mark_delete_ends_the_acknowledged_prefix(self) -> None:
        if not hasattr(self, "world"):
            return
        mark = self.world.sub.cursor.mark_delete_position
        for position in sorted(self.acked):
            if position <= mark:
                assert self._is_done(position)
            else:
                assert not self._is_done(position), f"mark-delete {mark} stops before {position}"
                break


BatchAckMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBatchAckMachine = BatchAckMachine.TestCase
