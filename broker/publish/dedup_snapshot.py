"""PIP-6 persistence: the dedup snapshot lives on a cursor, recovery replays the log after it.

The pure state is ``broker.publish.dedup.MessageDeduplication``; this module connects it to the
ledger,
exactly as the PIP describes: a dedicated cursor ``pulsar.dedup`` whose mark-delete carries the
``{producer_name: highest persisted sequence id}`` map as its properties, and on load a replay of
every entry after that mark-delete (parsing only producer name and sequence ids, whose identity
rule is ``protocol.send_identity``, shared with the publish path).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from broker.config import BrokerConfig
from broker.publish.dedup import DedupConfig, MessageDeduplication
from broker.storage import (
    CorruptCursorError,
    EntryCache,
    FileLayer,
    Ledger,
    LedgerConfig,
    OsFileLayer,
    Position,
    cursor_file,
    quarantine_cursor_file,
)
from protocol.enums import InitialPosition
from protocol.errors import RemoteProtocolError
from protocol.metadata import parse_entry_metadata
from protocol.send_identity import exact_batch_highest, of_metadata

log = logging.getLogger(__name__)

DEDUP_CURSOR = "pulsar.dedup"
_REPLAY_CHUNK = 1000


def dedup_config_from(config: BrokerConfig) -> DedupConfig:
    return DedupConfig(
        entries_interval=config.broker_deduplication_entries_interval,
        snapshot_interval_s=float(config.broker_deduplication_snapshot_interval_seconds),
        max_number_of_producers=config.broker_deduplication_max_number_of_producers,
    )


def recover_dedup(
    ledger: Ledger, config: DedupConfig, *, now: float | None = None, full_replay: bool = False
) -> MessageDeduplication[Position]:
    """PIP-6 recovery: the snapshot on the ``pulsar.dedup`` cursor, then replay every entry after.

    Runs exactly once per topic load, in the loader thread, before any producer is admitted
    (Pulsar #25954). Only producer name and sequence ids are parsed from each entry.

    A topic without the cursor starts tracking afresh from its end, as Java opens the cursor at
    Latest: the cursor is created (and persisted) when dedup is first enabled, before any entry
    it must cover is written, so a missing cursor means dedup was off for what the log holds.
    A cursor whose mark-delete had to be pulled back (the log lost durable entries) carries a
    snapshot describing entries that no longer exist; it is ignored and the whole log replayed.
    ``full_replay`` does the same on request: the snapshot file was damaged and set aside
    (``open_ledger_for_dedup``), so the state is rebuilt from every entry the log still holds.
    """
    started = time.monotonic()
    cursor = ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Latest)
    snapshot: dict[str, int] = dict(cursor.properties)
    snapshot_position: Position | None = cursor.mark_delete_position
    replay_from = ledger.next_position(cursor.mark_delete_position)
    if cursor.was_clamped or full_replay:
        log.warning(
            "%s: dedup snapshot unusable (%s); replaying the whole log",
            ledger.directory,
            "damaged" if full_replay else "ahead of the log",
        )
        snapshot, snapshot_position = {}, None
        replay_from = ledger.next_position(ledger.before_first_position())
    dedup: MessageDeduplication[Position] = MessageDeduplication.begin_recovery(
        snapshot, config=config, snapshot_position=snapshot_position
    )
    records: list[tuple[str, int, int]] = []
    for position, entry in ledger.iter_entries(replay_from):
        try:
            meta = parse_entry_metadata(entry)
        except RemoteProtocolError as exc:
            # Written by an older build, or damaged in a way the CRC cannot see: it holds no
            # id dedup could match, and refusing the load would make the whole topic unusable.
            log.warning(
                "%s: dedup replay skips unreadable entry %s: %s", ledger.directory, position, exc
            )
            dedup.note_unreadable_entry()
            continue
        if meta.is_partial_chunk:
            dedup.replay(records)
            records = []
            dedup.replay_chunk(meta.producer_name, meta.sequence_id, meta.chunk_id)
            continue
        records.append(of_metadata(meta))
        if len(records) >= _REPLAY_CHUNK:
            dedup.replay(records)
            records = []
    dedup.replay(records)
    dedup.finish_recovery(
        now=time.monotonic() if now is None else now,
        last_position=ledger.last_confirmed_position,
        elapsed_s=time.monotonic() - started,
    )
    return dedup


def exact_batch_highest_sequence_id(entry: bytes, estimate: int) -> int:
    """The exact last sequence id of an uncompressed batch, else ``estimate`` (dedup's rare
    path); see ``protocol.send_identity.exact_batch_highest``."""
    return exact_batch_highest(entry, estimate)


def open_ledger_for_dedup(
    directory: Path, config: LedgerConfig, layer: FileLayer | None, cache: EntryCache | None = None
) -> tuple[Ledger, bool]:
    """Open a topic's ledger; a damaged dedup snapshot is set aside instead of failing the open.

    Returns the ledger and whether the snapshot was damaged (then recover with
    ``full_replay=True``). Damage in any other cursor or in the data still refuses the open:
    those hold state that cannot be rebuilt, so nothing is dropped silently. ``cache``: the
    broker's entry cache (``Ledger.open``).
    """
    try:
        return Ledger.open(directory, config, file_layer=layer, cache=cache), False
    except CorruptCursorError as exc:
        if exc.path != cursor_file(directory, DEDUP_CURSOR):
            raise
        moved = quarantine_cursor_file(directory, DEDUP_CURSOR, layer or OsFileLayer())
        log.error("%s: damaged dedup snapshot moved to %s (%s)", directory, moved, exc.reason)
        return Ledger.open(directory, config, file_layer=layer, cache=cache), True
