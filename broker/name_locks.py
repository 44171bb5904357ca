"""``NameLocks``: one ``asyncio.Lock`` per name, kept only while someone holds or awaits it.

The topic registry serializes loading, unloading and deleting per topic name, and the names come
from clients: a lookup or producer for a topic that does not exist takes a lock too. A plain
dict of locks would keep one entry for every name ever sent; here an entry goes away with its
last user, so the dict holds only the names being worked on right now.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["NameLocks"]


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holding or waiting


class NameLocks:
    """Locks by name (event-loop thread only)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        """How many names have a holder or a waiter."""
        return len(self._entries)

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        """Hold the lock of ``name``, waiting for earlier holders; a cancelled wait counts
        as leaving."""
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = _Entry()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[name]
