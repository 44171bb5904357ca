"""``LedgerConfig``: the knobs of one topic's ledger, named after Pulsar's broker.conf keys.

Pulsar key (broker.conf) -> field:
* ``managedLedgerMaxEntriesPerLedger`` (50000) -> ``max_entries_per_ledger``
* ``managedLedgerMaxSizePerLedgerMbytes`` (2048) -> ``max_size_per_ledger_bytes``
* ``journalSyncData`` (true, a BookKeeper key) -> ``sync_data``
* ``managedLedgerCacheSizeMB`` -> ``cache_size_bytes``: the size of a ledger's own cache when it is
  opened alone; a broker passes its one ``EntryCache`` of that size, shared by every ledger
* ``defaultRetentionTimeInMinutes`` (0) / ``defaultRetentionSizeInMB`` (0) ->
  ``retention_time_minutes`` / ``retention_size_mb``: 0 = nothing kept beyond consumption,
  -1 = infinite.
* ``managedLedgerDefaultMarkDeleteRateLimit`` (1/s) -> ``persist_interval_s`` (1.0)
* ``managedLedgerMaxUnackedRangesToPersist`` (10000) -> ``max_unacked_ranges_to_persist``
* ``managedLedgerMaxBatchDeletedIndexToPersist`` (10000) ->
  ``max_batch_deleted_index_to_persist``

Ours only: ``preallocate_bytes`` (zero-filled size of a new segment file, capped by the roll
size) and ``verify_sealed_on_open`` (check the whole-segment CRC of every sealed segment when the
ledger opens, so a bit flip is reported before anything is served).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024

# Offsets in the in-memory index are u64 but a record's length field is u32; a single entry
# must also fit one pwrite comfortably.
MAX_ENTRY_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    """Per-topic storage settings (validated at construction)."""

    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_bytes: int = 2048 * MIB
    sync_data: bool = True
    cache_size_bytes: int = 16 * MIB
    preallocate_bytes: int = 8 * MIB
    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    persist_interval_s: float = 1.0
    max_unacked_ranges_to_persist: int = 10_000
    max_batch_deleted_index_to_persist: int = 10_000
    verify_sealed_on_open: bool = True
    #: BookKeeper's ``dbStorage_directIOEntryLogger`` (off there, on here: P1 of issue #26):
    #: large flushes bypass the page cache (``broker.storage.direct_io``).
    direct_io: bool = True
    #: Cluster mode: the ownership epoch of the broker opening the ledger. It names the
    #: metadata file this owner writes (``ledger.meta.<epoch>``; see ``metadata``), so a paused
    #: former owner's late rewrite of its own file can never replace the new owner's. None
    #: (standalone): the plain ``ledger.meta``.
    owner_epoch: int | None = None

    def __post_init__(self) -> None:
        positive = ("max_entries_per_ledger", "max_size_per_ledger_bytes")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"LedgerConfig.{name} must be >= 1")
        non_negative = (
            "cache_size_bytes",
            "preallocate_bytes",
            "persist_interval_s",
            "max_unacked_ranges_to_persist",
            "max_batch_deleted_index_to_persist",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ValueError(f"LedgerConfig.{name} must be >= 0")
        for name in ("retention_time_minutes", "retention_size_mb"):
            if getattr(self, name) < -1:
                raise ValueError(f"LedgerConfig.{name} must be -1 (infinite) or >= 0")

    @property
    def segment_preallocation(self) -> int:
        """Bytes to zero-fill in a new segment file: never more than a full segment."""
        return min(self.preallocate_bytes, self.max_size_per_ledger_bytes)
