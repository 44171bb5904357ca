"""``MetadataMirror``: a live copy of the JSON values under one etcd prefix (cluster mode).

Pulsar's brokers read their metadata through a cache that the store's notifications keep
current; this is that cache. At start the mirror reads the whole prefix together with the
store's revision, then watches from the next revision, so it misses no change and applies none
twice. Every change is applied in revision order per key: a value is replaced only by one of a
later revision, and a deletion is remembered by its revision too, so a late event can never
bring back a deleted key. A broken watch (etcd restarted, revision compacted) is followed by a
full read and a new watch.

Writes are read-modify-write with compare-and-swap on the key's ``mod_revision``: ``update``
applies a pure function to the current value and writes the result only if nobody changed the
key meanwhile, else reads it again and retries. So each write changes only what it means to
change (a grant replaces one role's actions, not the namespace's whole document as this broker
last saw it), and a revoke made elsewhere is never put back. The written value is applied here
at once (read-your-writes on this broker); the other brokers see it through their watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: Compare-and-swap attempts before a write gives up (each one lost to another writer).
MAX_ATTEMPTS = 64
#: Pause before a broken watch is read and watched again.
RESYNC_PAUSE_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Versioned:
    """One key as read or watched: its value (None once deleted) and the revision of its last
    change, which a compare-and-swap compares (0 for a key that does not exist)."""

    key: str
    value: bytes | None
    mod_revision: int


class VersionedStore(Protocol):
    """What the mirror needs of etcd (``broker.cluster.store.EtcdStore``)."""

    async def read_prefix(self, prefix: str) -> tuple[list[Versioned], int]: ...

    async def read(self, key: str) -> Versioned | None: ...

    async def swap(self, key: str, value: bytes | None, mod_revision: int) -> int | None: ...

    def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[Versioned]: ...


class MetadataConflictError(RuntimeError):
    """A write lost the compare-and-swap ``MAX_ATTEMPTS`` times in a row."""


def encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


class MetadataMirror:
    """The keys under ``prefix``, decoded, kept current by a watch (see the module docstring)."""

    def __init__(self, store: VersionedStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self._values: dict[str, tuple[Any, int]] = {}  # key -> (decoded value, mod_revision)
        self._seen: dict[str, int] = {}  # key -> revision of its last change, deletions too
        self._listeners: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        revision = await self._resync()
        self._task = asyncio.create_task(self._follow(revision), name=f"watch {self.prefix}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(key)`` after each change of a key (from any broker)."""
        self._listeners.append(listener)

    # -- reads (synchronous: the cache) ----------------------------------------------------------

    def get(self, key: str) -> Any:
        """The decoded value of ``key``, None if absent. Callers must not modify it."""
        found = self._values.get(key)
        return None if found is None else found[0]

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def items(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """(key, value) of the keys starting with ``prefix``."""
        for key, (value, _) in list(self._values.items()):
            if key.startswith(prefix):
                yield key, value

    # -- writes ------------------------------------------------------------------------------------

    async def update(self, key: str, change: Callable[[Any], Any]) -> Any:
        """Write ``change(current)`` (None deletes; ``current`` is None if absent, a copy
        otherwise) with compare-and-swap, retrying on conflict; the value now stored. Nothing is
        written when the result equals the current value."""
        found = self._values.get(key)
        current, revision = (None, 0) if found is None else found
        for _ in range(MAX_ATTEMPTS):
            wanted = change(copy.deepcopy(current))
            if wanted == current:
                return current
            payload = None if wanted is None else encode(wanted)
            done = await self.store.swap(key, payload, revision)
            if done is not None:
                self._apply(key, payload, done)
                return wanted
            fresh = await self.store.read(key)  # somebody else wrote it: start from theirs
            if fresh is None or fresh.value is None:
                current, revision = None, 0
            else:
                current, revision = json.loads(fresh.value), fresh.mod_revision
        raise MetadataConflictError(f"{key}: {MAX_ATTEMPTS} concurrent writes won over ours")

    # -- following the store -----------------------------------------------------------------------

    def _apply(self, key: str, value: bytes | None, revision: int) -> None:
        if revision <= self._seen.get(key, 0):
            return  # this change, or a later one, is already applied
        self._seen[key] = revision
        if value is None:
            if self._values.pop(key, None) is None:
                return
        else:
            try:
                self._values[key] = (json.loads(value), revision)
            except ValueError:
                log.error("metadata key %s holds no JSON; ignored", key)
                self._values.pop(key, None)
        for listener in self._listeners:
            listener(key)

    async def _resync(self) -> int:
        """Read the whole prefix; apply what changed; the revision of the read."""
        entries, revision = await self.store.read_prefix(self.prefix)
        present = set()
        for entry in entries:
            present.add(entry.key)
            self._apply(entry.key, entry.value, entry.mod_revision)
        for key in [k for k in self._values if k not in present]:
            self._apply(key, None, revision)  # deleted while we were not watching
        return revision

    async def _follow(self, revision: int) -> None:
        while True:
            try:
                async for change in self.store.watch_prefix(self.prefix, revision + 1):
                    self._apply(change.key, change.value, change.mod_revision)
                    revision = max(revision, change.mod_revision)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any broken stream: read again, rewatch
                log.warning("metadata watch on %s broke (%s); reading it again", self.prefix, exc)
            await asyncio.sleep(RESYNC_PAUSE_SECONDS)
            with contextlib.suppress(Exception):
                revision = await self._resync()
