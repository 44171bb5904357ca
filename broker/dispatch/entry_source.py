"""What a subscription reads from its topic: ``EntrySource``.

Implemented by ``broker.topics.topic.Topic``, and by ``broker.compaction.reads`` for a subscription
that reads the compacted view.
"""

from __future__ import annotations

from typing import Protocol

from broker.dispatch.entry_loader import EntryReads
from broker.storage import Position
from protocol.metadata import EntryMetadata


class EntrySource(EntryReads, Protocol):
    """What a subscription reads from its topic (implemented by ``broker.topics.topic.Topic``):
    entries from memory or, off the loop, from disk (``EntryReads``), and facts about them."""

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata | None:
        """The entry's metadata, or None for an entry whose metadata does not parse."""
        ...

    def next_position(self, position: Position) -> Position: ...

    def last_confirmed_position(self) -> Position: ...
