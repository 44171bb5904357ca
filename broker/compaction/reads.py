"""readCompacted: a subscription's entries from the compacted view, then from the log.

A subscription whose consumer asked for ``read_compacted`` reads through a
``CompactedEntrySource`` instead of the topic itself (Pulsar's ``CompactedTopicImpl`` behind the
single-active-consumer dispatcher): positions up to the compaction horizon come from the current
view (sparse: only what survived), positions after it from the ledger. Both carry the original
message ids, so the subscription's cursor, acks and seeks need no translation.

The source is *pinned* to the view that was current when it was made (a consumer attaching to a
subscription without consumers, or a seek, makes a new one: `repin`). A compaction finishing
mid-read must not switch views under a reader: the reader may have read key K from the old view
and be somewhere in the log after it; the new view no longer holds K's deletion (compaction
drops deletions), so reading on in the new view would leave K in the reader's table for ever.
Pinned, it reads the old view and then the whole log after the old horizon, deletions included.
(Pulsar switches to the newest compacted ledger at the next read; the leader-state test catches
exactly this as a leader starting with a key its predecessor had deleted.)

``last_message_id`` is what GET_LAST_MESSAGE_ID answers such a consumer (Pulsar does the same for
``readCompacted``): when nothing was written after the horizon, the last entry *of the view*, so
``has_message_available`` does not wait for a message (say, a deletion marker) that compaction
removed.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from broker.blocking import run_blocking, submit_blocking
from broker.compaction.compactor import TopicCompaction
from broker.dispatch.entry_loader import Entries
from broker.dispatch.entry_source import EntrySource
from broker.storage import Position
from broker.storage.compacted_view import CompactedView
from protocol.errors import RemoteProtocolError
from protocol.ids import MessageId
from protocol.metadata import EntryMetadata, parse_entry_metadata


class CompactedTopicReads(EntrySource, Protocol):
    """What compacted reads need of their topic (``broker.topics.topic.Topic``): its log as a
    subscription reads it, its compaction, and whether it was terminated."""

    compaction: TopicCompaction

    @property
    def terminated(self) -> bool: ...

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> asyncio.Future[Entries]: ...


class CompactedEntrySource:
    """``EntrySource`` over the compacted view and the log tail after its horizon."""

    def __init__(self, topic: CompactedTopicReads) -> None:
        self._topic = topic
        self._pinned = topic.compaction.view

    def repin(self) -> None:
        """Read the current view from now on (the subscription restarts: seek, new consumer)."""
        self._pinned = self._topic.compaction.view

    @property
    def terminated(self) -> bool:
        return self._topic.terminated

    def _view(self) -> CompactedView | None:
        view = self._pinned
        return view if view is not None and view.horizon.ledger_id >= 0 else None

    def _tail_start(self, view: CompactedView) -> Position:
        return self._topic.next_position(view.horizon)

    def _in_view(self, position: Position) -> CompactedView | None:
        """The view when ``position`` is to be read from it (some view entry at or after it)."""
        view = self._view()
        if view is None or position > view.horizon:
            return None
        if view.first_index_at_or_after(position) >= len(view):
            return None
        return view

    def _ledger_start(self, position: Position) -> Position:
        view = self._view()
        if view is None or position > view.horizon:
            return position
        return max(position, self._tail_start(view))

    def read_cached(self, position: Position, max_entries: int, max_bytes: int) -> Entries | None:
        if self._in_view(position) is not None:
            return None  # the view is on disk: read it off the loop
        return self._topic.read_cached(self._ledger_start(position), max_entries, max_bytes)

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> asyncio.Future[Entries]:
        view = self._in_view(position)
        if view is not None:
            return submit_blocking(view.read, position, max_entries, max_bytes)
        return self._topic.read_from_disk(self._ledger_start(position), max_entries, max_bytes)

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata | None:
        view = self._view()
        if view is None or position > view.horizon:
            return self._topic.entry_metadata(position, entry)
        # A rewritten batch differs from the log's entry at the same position: no shared cache.
        try:
            return parse_entry_metadata(entry)
        except RemoteProtocolError:
            return None

    def next_position(self, position: Position) -> Position:
        view = self._view()
        if view is None or position >= view.horizon:
            return self._topic.next_position(position)
        following = view.next_after(position)
        return following if following is not None else self._tail_start(view)

    def last_confirmed_position(self) -> Position:
        return self._topic.last_confirmed_position()

    async def last_message_id(self, partition: int) -> MessageId | None:
        """The last id a compacted reader can receive; None when the log's last is (the tail
        after the horizon is not empty, or there is no view)."""
        view = self._view()
        last = self._topic.last_confirmed_position()
        if view is None or last > view.horizon:
            return None
        position = view.last_position
        if position is None:
            return MessageId(-1, -1)
        found = await run_blocking(view.read, position, 1, 1 << 62)
        meta = parse_entry_metadata(found[0][1])
        batch_index = meta.num_messages - 1 if meta.is_batch else -1
        return MessageId(position.ledger_id, position.entry_id, partition, batch_index)
