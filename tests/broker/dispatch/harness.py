"""The harness of the subscription tests: a real ledger, one subscription, fake clients.

``Harness`` holds a real ``Ledger`` in ``tmp_path``, an ``EntrySource`` over it, a manual
scheduler and list-backed sinks (the ``world`` fixture of ``conftest.py``). Entries are opaque to
the subscription except through ``EntrySource.entry_metadata``, so the stored bytes simply name
their batch size (``b"n=10"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from broker.dispatch.consumer import Consumer, RunItem
from broker.dispatch.subscription import DispatchLimits, Subscription
from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.cursor_file import decode_cursor_state
from broker.storage.cursor_registry import CURSOR_DIR, cursor_file_stem
from broker.storage.files import read_file
from protocol.enums import InitialPosition, SubType
from protocol.metadata import EntryMetadata
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

SUB = "sub"
_U64 = 1 << 64

# --------------------------------------------------------------------------- bit sets


def ack_set(size: int, unacked: Iterable[int]) -> list[int]:
    """Java BitSet words (signed int64, as on the wire) with the ``unacked`` bits set."""
    words = [0] * ((size + 63) // 64)
    for index in unacked:
        words[index // 64] |= 1 << (index % 64)
    return [w - _U64 if w >= 1 << 63 else w for w in words]


def clearing(size: int, acked: Iterable[int]) -> list[int]:
    """The ack set a client sends after acknowledging ``acked`` of a batch of ``size``."""
    done = set(acked)
    return ack_set(size, (i for i in range(size) if i not in done))


def indexes_of(words: list[int] | None, size: int) -> set[int]:
    """Indexes a client delivers for a MESSAGE with ``words`` (None/empty = all of them)."""
    if not words:
        return set(range(size))
    return {i for i in range(size) if i // 64 < len(words) and (words[i // 64] >> (i % 64)) & 1}


# --------------------------------------------------------------------------- harness


@dataclass
class Sent:
    consumer_id: int
    position: Position
    redelivery_count: int
    ack_set: list[int] | None


@dataclass
class FakeSink:
    """A connection that records what the dispatcher sends."""

    sent: list[Sent] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    writable: bool = True

    #: the length of each run handed over (one write each)
    runs: list[int] = field(default_factory=list)

    def send_messages(self, consumer_id: int, run: list[RunItem]) -> None:
        self.runs.append(len(run))
        for position, _, redelivery_count, ack_set in run:
            self.sent.append(Sent(consumer_id, position, redelivery_count, ack_set))

    def is_writable(self) -> bool:
        return self.writable

    def close_consumer(self, consumer_id: int) -> None:
        self.closed.append(consumer_id)

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        pass


class Handle:
    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """``call_later`` queues; ``run`` executes everything queued (delays are ignored)."""

    def __init__(self) -> None:
        self.queue: list[Handle] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle(callback)
        self.queue.append(handle)
        return handle

    def run(self) -> None:
        while self.queue:
            handle = self.queue.pop(0)
            if not handle.cancelled:
                handle.callback()


class LedgerSource:
    """``EntrySource`` over a real ledger; an entry ``b"n=N"`` is a batch of N messages.

    A disk read completes in a later scheduler turn, as a read in a worker thread would."""

    def __init__(self, ledger: Ledger, scheduler: ManualScheduler) -> None:
        self.ledger = ledger
        self.scheduler = scheduler

    def read_cached(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]] | None:
        return self.ledger.read_cached(position, max_entries, max_bytes)

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> Future[list[tuple[Position, bytes]]]:
        future: Future[list[tuple[Position, bytes]]] = Future()
        self.scheduler.call_later(
            0, lambda: future.set_result(self.ledger.read(position, max_entries, max_bytes))
        )
        return future

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata:
        size = int(entry.decode().removeprefix("n="))
        return EntryMetadata(
            producer_name="p",
            sequence_id=position.entry_id,
            highest_sequence_id=None,
            num_messages=size,
            is_batch=size > 1,
            publish_time=0,
            partition_key=None,
            ordering_key=None,
            deliver_at_time=None,
            event_time=None,
        )

    def next_position(self, position: Position) -> Position:
        return self.ledger.next_position(position)

    def last_confirmed_position(self) -> Position:
        last = self.ledger.last_confirmed_position
        return last if last is not None else self.ledger.before_first_position()


class Harness:
    """A ledger, one durable subscription over it, and helpers to drive it like a client."""

    def __init__(
        self,
        directory: Path,
        *,
        batch_index_ack: bool = True,
        config: LedgerConfig | None = None,
    ) -> None:
        self.directory = directory
        self.config = config or LedgerConfig(preallocate_bytes=0)
        self.limits = DispatchLimits(batch_index_ack=batch_index_ack)
        self.scheduler = ManualScheduler()
        self.sizes: dict[Position, int] = {}
        self._open()

    def _open(self) -> None:
        self.ledger = Ledger.open(
            self.directory, self.config, file_layer=NoSyncLayer(), preallocator=InlineExecutor()
        )
        cursor = self.ledger.open_cursor(SUB, InitialPosition.Earliest)
        source = LedgerSource(self.ledger, self.scheduler)
        self.sub = Subscription(SUB, cursor, source, self.scheduler, self.limits)

    def publish(self, *sizes: int) -> list[Position]:
        positions = [self.ledger.append(f"n={size}".encode()) for size in sizes]
        self.ledger.flush()
        for position, size in zip(positions, sizes, strict=True):
            self.sizes[position] = size
        self.sub.schedule_dispatch()
        self.run()
        return positions

    def consumer(
        self,
        sub_type: SubType = SubType.Shared,
        permits: int = 1000,
        *,
        returns_permits_for_skipped: bool = True,
        consumer_id: int = 0,
    ) -> tuple[Consumer, FakeSink]:
        sink = FakeSink()
        consumer = Consumer(
            consumer_id,
            f"c{consumer_id}",
            sink,
            returns_permits_for_skipped=returns_permits_for_skipped,
        )
        self.sub.add_consumer(consumer, sub_type)
        self.sub.add_permits(consumer, permits)
        self.run()
        return consumer, sink

    def run(self) -> None:
        self.scheduler.run()

    def ack(self, position: Position, acked: Iterable[int] | None = None) -> None:
        """Individual ack of the whole entry, or (PIP-54) of the ``acked`` indexes."""
        words = None if acked is None else clearing(self.sizes[position], acked)
        self.sub.acknowledge(None, [(position, words)])
        self.run()

    def ack_cumulative(self, position: Position, index: int | None = None) -> None:
        """Cumulative ack through ``position`` (through its ``index`` if given, PIP-54)."""
        size = self.sizes[position]
        words = None
        if index is not None and index < size - 1:
            words = clearing(size, range(index + 1))
        self.sub.acknowledge_cumulative(None, position, words)
        self.run()

    def restart(self) -> None:
        """Clean restart: the ledger closes (persisting the cursor) and everything reopens."""
        self.sub.close()
        self.ledger.close()
        self._open()

    def crash(self) -> None:
        """SIGKILL: nothing is persisted beyond what already was; everything reopens."""
        self.scheduler.queue.clear()  # the dead process's pending dispatches die with it
        self.ledger._abandon()
        self._open()

    def cursor_file_batches(self) -> dict[Position, list[int]]:
        path = self.directory / CURSOR_DIR / (cursor_file_stem(SUB) + ".cursor")
        return decode_cursor_state(read_file(path), path).batch

    def delivered(self, sent: Sent) -> set[int]:
        return indexes_of(sent.ack_set, self.sizes[sent.position])

    def close(self) -> None:
        self.sub.close()
        self.ledger.close()
