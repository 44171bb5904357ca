"""Topics whose storage cannot be opened, remembered so that every request is refused at once.

When ``Ledger.open`` raises ``CorruptLedgerError`` the broker marks the topic with the damage
(file, byte offset, reason) and a fingerprint of the files involved: ``ledger.meta`` and the
damaged file (inode, size, modification time, or absence). While the fingerprint holds, lookups,
producers, consumers, readers and the stats are refused from the mark with ``TopicDamaged``:
the ledger is not opened again (which would re-read up to a whole 2 GiB segment per client
retry) and nothing more is logged. When the files change (``magnetar repair-topic`` rewrites
``ledger.meta``; an operator restores a file from a backup), the next request loads the topic
afresh. Unloading the topic clears the mark as well.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.errors import TopicDamaged
from broker.storage import CorruptLedgerError
from broker.storage.ledger_meta_file import current_metadata_path

# (inode, size, mtime in ns) per file, None for a missing file.
Fingerprint = tuple[tuple[int, int, int] | None, ...]


def fingerprint(paths: tuple[Path, ...]) -> Fingerprint:
    """What identifies the current content of ``paths`` without reading them."""
    return tuple(_stat(path) for path in paths)


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class TopicDamage:
    """Why a topic was refused, and the state of its files when it was."""

    topic: str
    path: Path
    offset: int
    reason: str
    description: str
    since: float
    watched: tuple[Path, ...]
    seen: Fingerprint

    @classmethod
    def of(cls, topic: str, directory: Path, error: CorruptLedgerError) -> TopicDamage:
        """Record ``error`` for ``topic`` (reads file metadata: call off the event loop)."""
        watched = tuple(dict.fromkeys((current_metadata_path(directory), error.path)))
        return cls(
            topic=topic,
            path=error.path,
            offset=error.offset,
            reason=error.reason,
            description=str(error),
            since=time.time(),
            watched=watched,
            seen=fingerprint(watched),
        )

    def files_unchanged(self) -> bool:
        """Whether the files are as they were when the damage was found (reads metadata)."""
        return fingerprint(self.watched) == self.seen

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "file": str(self.path),
            "offset": self.offset,
            "since": self.since,
            "repair": f"magnetar repair-topic {self.topic}",
        }

    def error(self) -> TopicDamaged:
        return TopicDamaged(
            f"Topic {self.topic} cannot be opened, its storage is damaged: {self.description}. "
            f"Nothing was dropped; `magnetar repair-topic {self.topic}` shows what "
            "--truncate-to-valid-prefix would cut",
            self.to_json(),
        )


class DamagedTopics:
    """The marks, by full topic name (event-loop thread only)."""

    def __init__(self) -> None:
        self._marks: dict[str, TopicDamage] = {}

    def get(self, topic: str) -> TopicDamage | None:
        return self._marks.get(topic)

    def mark(self, damage: TopicDamage) -> None:
        self._marks[damage.topic] = damage

    def clear(self, topic: str, damage: TopicDamage | None = None) -> None:
        """Forget ``topic``'s mark (only if it is still ``damage``, when given)."""
        if damage is None or self._marks.get(topic) is damage:
            self._marks.pop(topic, None)

    def __len__(self) -> int:
        return len(self._marks)
