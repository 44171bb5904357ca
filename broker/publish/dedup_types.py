"""The vocabulary of PIP-6 dedup, shared by its parts: the verdict of a check, the lifecycle
state and its error, the tuning knobs, and the record a replay feeds.

The state itself is ``broker.publish.dedup.MessageDeduplication``, which re-exports these names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

ReplayRecord = tuple[str, int, int]
"""``(producer_name, sequence_id, highest_sequence_id)`` of one stored entry, in log order."""

NO_SEQUENCE_ID = -1
"""What PRODUCER_SUCCESS.last_sequence_id carries for a name the topic knows nothing about."""


class DedupResult(enum.Enum):
    """Verdict of `MessageDeduplication.check` (Java's ``MessageDupStatus``)."""

    NOT_DUP = "not_dup"
    """New: store the entry, then receipt it with its real position."""
    DUP = "dup"
    """Already stored: receipt with message id (-1, -1) and store nothing."""
    UNKNOWN = "unknown"
    """Overlaps ids still in flight: answer a retriable error so the client resends later."""


class DedupState(enum.Enum):
    RECOVERING = "recovering"
    READY = "ready"


class DedupStateError(RuntimeError):
    """An operation was called in a lifecycle state that does not allow it (a topic bug)."""


@dataclass(frozen=True, slots=True)
class DedupConfig:
    """Tuning knobs, named after the broker settings they come from."""

    entries_interval: int = 1000
    """brokerDeduplicationEntriesInterval: snapshot after this many persisted entries."""
    snapshot_interval_s: float = 120.0
    """brokerDeduplicationSnapshotIntervalSeconds: snapshot an idle-but-changed topic after
    this long; 0 disables the time-based snapshot."""
    max_number_of_producers: int = 10_000
    """brokerDeduplicationMaxNumberOfProducers: names kept in one snapshot."""

    def __post_init__(self) -> None:
        if self.entries_interval < 1:
            raise ValueError(f"entries_interval must be >= 1, got {self.entries_interval}")
        if self.snapshot_interval_s < 0:
            raise ValueError(f"snapshot_interval_s must be >= 0, got {self.snapshot_interval_s}")
        if self.max_number_of_producers < 1:
            raise ValueError(
                f"max_number_of_producers must be >= 1, got {self.max_number_of_producers}"
            )
