"""Non-persistent topics (``non-persistent://``): in memory, at-most-once, no storage.

Pulsar's ``NonPersistentTopic`` hands each message straight to the connected consumers and
forgets it: nothing is written, a subscription exists only while it has consumers and starts at
the end, a consumer without permits misses messages, nothing is ever redelivered. Magnetar gets
the same by running the ordinary ``Topic`` (producers, PIP-68 access modes, flow control,
subscription types, GET_LAST_MESSAGE_ID) over a ``MemoryLog`` instead of a ledger:

* ``MemoryLog`` keeps only the newest ``NON_PERSISTENT_BUFFER_ENTRIES`` entries (the dispatch
  buffer: what consumers that are a little behind can still get); older ones are gone, so a
  consumer too slow to keep up skips them (Pulsar counts them as ``msgDropRate``). Nothing
  touches the disk; properties (the PIP-68 epoch) live as long as the topic is loaded.
* Every subscription is ``at_most_once``: it acknowledges an entry the moment it is sent, so a
  consumer that disconnects gets nothing redelivered, and no other consumer gets it again.
* Every subscription is in memory and starts at the end whatever the initial position.

Non-persistent topics are never partitioned here, have no compaction, no dedup, no admin REST
(Pulsar has ``/admin/v2/non-persistent/...``; not served), and are listed by
GET_TOPICS_OF_NAMESPACE while loaded (modes ``NON_PERSISTENT`` and ``ALL``), as Pulsar lists the
active ones.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import cast
from uuid import uuid4

from broker.config import BrokerConfig
from broker.dispatch.subscription import Subscription
from broker.errors import NotAllowed
from broker.publish.producers import Producer
from broker.storage import Cursor, Ledger, LedgerConfig, Position
from broker.storage.buckets import LATENCY_MS_BOUNDS, Buckets, BucketsSnapshot
from broker.storage.cursor_file import CursorState
from broker.topics.topic import Topic
from protocol.topic_name import NON_PERSISTENT, NamespaceName, TopicName

#: Entries a non-persistent topic keeps for consumers that are slightly behind.
NON_PERSISTENT_BUFFER_ENTRIES = 1000
#: Seconds a non-persistent topic without producers and subscriptions stays loaded (Pulsar
#: deletes inactive topics every ``brokerDeleteInactiveTopicsFrequencySeconds``, 60).
IDLE_SECONDS = 60.0
_LEDGER_ID = 0


class MemoryLog:
    """The ``Ledger`` surface ``Topic`` uses, over the newest entries in memory."""

    def __init__(self, capacity: int = NON_PERSISTENT_BUFFER_ENTRIES) -> None:
        self._entries: deque[bytes] = deque(maxlen=capacity)
        self._first_id = 0  # entry id of self._entries[0]
        self._next_id = 0
        self._properties: dict[str, int] = {}
        self.config = LedgerConfig(sync_data=False)
        self.directory = None
        self._empty = Buckets(LATENCY_MS_BOUNDS).snapshot()

    # -- positions --------------------------------------------------------------------

    @property
    def last_confirmed_position(self) -> Position | None:
        return Position(_LEDGER_ID, self._next_id - 1) if self._next_id else None

    last_position = last_confirmed_position

    @property
    def first_position(self) -> Position | None:
        return Position(_LEDGER_ID, self._first_id) if self._entries else None

    def before_first_position(self) -> Position:
        return Position(_LEDGER_ID, self._first_id - 1)

    def next_position(self, position: Position) -> Position:
        if position.ledger_id < _LEDGER_ID:
            return Position(_LEDGER_ID, self._first_id)
        return Position(_LEDGER_ID, max(position.entry_id + 1, self._first_id))

    def previous_position(self, position: Position) -> Position | None:
        if position.entry_id <= self._first_id:
            return None
        return Position(_LEDGER_ID, position.entry_id - 1)

    def has_entry(self, position: Position) -> bool:
        return position.ledger_id == _LEDGER_ID and self._first_id <= position.entry_id < (
            self._next_id
        )

    def entry_count_between(self, first: Position, last: Position) -> int:
        low = max(first.entry_id, self._first_id)
        return max(0, min(last.entry_id, self._next_id - 1) - low + 1)

    # -- writing and reading ------------------------------------------------------------

    def append(self, data: bytes) -> Position:
        if len(self._entries) == self._entries.maxlen:
            self._first_id += 1
        self._entries.append(data)
        self._next_id += 1
        return Position(_LEDGER_ID, self._next_id - 1)

    def append_many(self, entries: list[bytes], crcs: list[int] | None = None) -> list[Position]:
        """A group commit's entries (``Ledger.append_many``), in order; nothing is written, so
        ``crcs`` is not needed."""
        return [self.append(data) for data in entries]

    def flush(self) -> Position | None:
        return self.last_confirmed_position

    def read(
        self, position: Position, max_entries: int, max_bytes: int = 1 << 62
    ) -> list[tuple[Position, bytes]]:
        # Trimmed entries are gone (at most once): a read from before them starts at the first.
        first = self._first_id
        if position.ledger_id == _LEDGER_ID:
            first = max(position.entry_id, self._first_id)
        found: list[tuple[Position, bytes]] = []
        total = 0
        for entry_id in range(first, self._next_id):
            if len(found) >= max_entries:
                break
            data = self._entries[entry_id - self._first_id]
            if found and total + len(data) > max_bytes:
                break
            found.append((Position(_LEDGER_ID, entry_id), data))
            total += len(data)
        return found

    read_cached = read

    def iter_entries(self, start: Position) -> Iterator[tuple[Position, bytes]]:
        return iter(self.read(start, len(self._entries)))

    def find_newest_matching(self, predicate: Callable[[bytes], bool]) -> Position | None:
        newest = None
        for position, data in self.read(self.before_first_position(), len(self._entries)):
            if not predicate(data):
                break
            newest = position
        return newest

    # -- properties and cursors (in memory only) -----------------------------------------

    @property
    def properties(self) -> Mapping[str, int]:
        return MappingProxyType(dict(self._properties))

    def set_property(self, key: str, value: int) -> None:
        self._properties[key] = int(value)

    def set_properties(self, values: Mapping[str, int]) -> None:
        self._properties.update({k: int(v) for k, v in values.items()})

    @property
    def cursors(self) -> Mapping[str, Cursor]:
        return MappingProxyType({})

    def new_non_durable_cursor(self, start: Position) -> Cursor:
        state = CursorState(name=f"np-{uuid4().hex[:12]}", mark_delete=start.previous())
        return Cursor(state.name, self, state, store=None, persist_interval_s=1.0)

    def detach_cursor(self, name: str) -> None:
        return None

    def remove_cursor_file(self, name: str) -> None:
        return None

    def delete_cursor(self, name: str) -> None:
        return None

    # -- lifecycle and stats ------------------------------------------------------------

    def trim_due(self, now: float | None = None) -> bool:
        return False

    def trim(self, now: float | None = None) -> int:
        return 0

    def close(self) -> None:
        self._entries.clear()

    def delete(self) -> None:
        self.close()

    def _abandon(self) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        return {
            "segments": 0,
            "stored_entries": 0,
            "stored_bytes": 0,
            "pending_entries": 0,
            "cache_bytes": sum(len(e) for e in self._entries),
            "cache_hits": 0,
            "cache_misses": 0,
        }

    def group_commit_stats(self) -> tuple[BucketsSnapshot, BucketsSnapshot]:
        return self._empty, self._empty

    def segment_summaries(self) -> list[tuple[int, int, int, int | None]]:
        return []


class NonPersistentTopic(Topic):
    """A ``non-persistent://`` topic: ``Topic`` over a ``MemoryLog`` (module docstring)."""

    def __init__(
        self,
        name: TopicName,
        config: BrokerConfig,
        on_idle: Callable[[NonPersistentTopic], None] | None = None,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        """``on_idle`` is called once the topic has had no producer and no subscription for
        ``idle_seconds`` (the service then forgets and closes it)."""
        # MemoryLog offers every Ledger method Topic and its helpers call (checked by the tests).
        super().__init__(name, cast(Ledger, MemoryLog()), config, dedup=None)
        self._on_idle = on_idle
        self._idle_seconds = idle_seconds
        self._idle_timer: asyncio.TimerHandle | None = None
        self._check_idle()

    def is_idle(self) -> bool:
        waiting = self.producers.access.stats().waiters
        return not self.producers.producers and not self.subscriptions and not waiting

    def _check_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._on_idle is not None and not self.closed and self.is_idle():
            self._idle_timer = self._loop.call_later(self._idle_seconds, self._idle_elapsed)

    def _idle_elapsed(self) -> None:
        self._idle_timer = None
        if self._on_idle is not None and not self.closed and self.is_idle():
            self._on_idle(self)

    async def remove_producer(self, producer: Producer) -> None:
        await super().remove_producer(producer)
        self._check_idle()

    def _drop_non_durable(self, sub: Subscription) -> None:
        super()._drop_non_durable(sub)
        self._check_idle()

    async def delete_subscription(self, name: str) -> None:
        await super().delete_subscription(name)
        self._check_idle()

    async def get_or_create_subscription(
        self, name: str, *, durable: bool, start: Position | None, initial_earliest: bool
    ) -> Subscription:
        if self.closed:
            return await super().get_or_create_subscription(
                name, durable=durable, start=start, initial_earliest=initial_earliest
            )  # raises ServiceNotReady
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        end = self.ledger.next_position(self.last_confirmed_position())
        cursor = self.ledger.new_non_durable_cursor(end)
        sub = Subscription(
            name,
            cursor,
            self,
            self._loop,
            self._limits,
            durable=False,
            at_most_once=True,
            on_empty=self._drop_non_durable,
        )
        self.subscriptions[name] = sub
        return sub

    async def set_read_compacted(self, sub: Subscription, read_compacted: bool) -> None:
        if read_compacted:
            raise NotAllowed("readCompacted is not supported on non-persistent topics")

    async def set_dedup_enabled(self, enabled: bool) -> None:
        """Dedup needs durable marks: never on for an in-memory topic (as Pulsar's)."""
        return None

    async def terminate(self) -> Position:
        raise NotAllowed("Termination of a non-persistent topic is not supported")


def non_persistent_topics_of(topics: Mapping[str, Topic], namespace: NamespaceName) -> list[str]:
    """The loaded non-persistent topics of ``namespace`` (full names, sorted)."""
    prefix = f"{NON_PERSISTENT}://{namespace}/"
    return sorted(name for name in topics if name.startswith(prefix))


def get_non_persistent_topic(
    topics: dict[str, Topic], config: BrokerConfig, name: TopicName
) -> Topic:
    """The loaded non-persistent topic ``name``, created on first use (kept in ``topics``, the
    broker's registry, under its full name, so listing, metrics and shutdown see it, until it
    has been idle for ``IDLE_SECONDS``)."""
    topic = topics.get(name.full_name)
    if topic is None:

        def forget(idle: NonPersistentTopic) -> None:
            if topics.get(idle.name.full_name) is idle:
                del topics[idle.name.full_name]
                asyncio.get_running_loop().create_task(idle.close())

        topic = NonPersistentTopic(name, config, on_idle=forget, idle_seconds=IDLE_SECONDS)
        topics[name.full_name] = topic
    return topic
