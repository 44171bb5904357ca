"""``JsonDocument``: one small JSON file of broker metadata, rewritten atomically.

Each store under ``<dataDir>/metadata/`` keeps one document per concern, rewritten atomically
(temp + fsync + rename + dir fsync) by ``broker.storage.files.atomic_write``, so a crash leaves the
old or the new version. Changes apply to the in-memory state at once, on the event loop (so reads
never see a document half-updated by another thread); the write itself runs in a disk thread
(``broker/blocking.py``) and the mutating methods are coroutines that return once the change is
durable. Each write carries a snapshot taken on the loop with a version number, and a disk thread
never writes an older version over a newer one, so concurrent changes can finish in any order.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.blocking import run_blocking
from broker.storage.files import OsFileLayer, atomic_write


class JsonDocument:
    """One JSON file and the versions of it written so far (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._layer = OsFileLayer()
        self._lock = threading.Lock()
        self._version = 0  # snapshots taken (event loop)
        self._durable = 0  # newest snapshot on disk (disk threads, under the lock)

    def load(self) -> dict[str, Any]:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        loaded: dict[str, Any] = json.loads(data)
        return loaded

    @property
    def saved(self) -> bool:
        """Whether the last snapshot taken is durable."""
        return self._durable >= self._version

    async def save(self, document: dict[str, Any]) -> None:
        """Write ``document`` as it is now; return once it, or a newer version, is durable."""
        self._version += 1
        payload = json.dumps(document, sort_keys=True, indent=1).encode()
        await run_blocking(self._write, self._version, payload)

    async def save_serialized_off_loop(self, payload: Callable[[], bytes]) -> None:
        """As ``save``, but ``payload()`` runs in the disk thread: for documents the caller
        snapshots immutably (a tuple), whose serializing should not cost the loop."""
        self._version += 1
        await run_blocking(self._write, self._version, payload)

    def write_now(self, payload: bytes) -> None:
        """Write at once, in this thread (start-up, before the broker serves)."""
        self._version += 1
        self._write(self._version, payload)

    async def remove(self) -> None:
        """Delete the file (a disk thread); writes of older versions still running lose."""
        self._version += 1
        await run_blocking(self._write, self._version, None)

    def _write(self, version: int, payload: bytes | Callable[[], bytes] | None) -> None:
        with self._lock:
            if version <= self._durable:
                return  # a newer snapshot, which includes this change, is already durable
            if payload is None:
                if self._path.exists():
                    self._path.unlink()
                    self._layer.fsync_dir(self._path.parent)
            else:
                data = payload() if callable(payload) else payload
                self._path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self._layer, self._path, data)
            self._durable = version
