"""Topics written straight through the storage API, for the load-time and memory figures.

Publishing a million entries through the broker would take most of the time budget, and the
figures measure *loading* a topic, not writing it. The entries are exactly what a producer
writes (``[metadataSize][MessageMetadata][payload]``), spread round-robin over ``producers``
names with increasing sequence ids; the ``pulsar.dedup`` cursor then either carries the full
snapshot (every producer's highest id, at the last entry) or none (mark-delete before the first
entry, no properties), so the broker replays the whole log on load.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.storage import Ledger, LedgerConfig
from broker.storage.paths import topic_directory
from protocol._pb import PulsarApi_pb2 as pb
from protocol.enums import InitialPosition
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName

PAYLOAD = bytes(16)


def producer_name(index: int) -> str:
    return f"bench-producer-{index}"


def build_topic(data_dir: Path, topic: str, entries: int, producers: int) -> Path:
    """Write ``entries`` entries to ``topic``'s ledger in ``data_dir`` (no dedup cursor yet)."""
    directory = topic_directory(data_dir, TopicName.parse(topic))
    ledger = Ledger.open(directory, LedgerConfig(sync_data=False))
    try:
        metadata = pb.MessageMetadata(publish_time=int(time.time() * 1000))
        names = [producer_name(i) for i in range(producers)]
        for index in range(entries):
            metadata.producer_name = names[index % producers]
            metadata.sequence_id = index // producers
            ledger.append(encode_entry(metadata, PAYLOAD))
            if index % 10_000 == 9_999:
                ledger.flush()
        ledger.flush()
    finally:
        ledger.close()
    return directory


def highest_sequence_ids(entries: int, producers: int) -> dict[str, int]:
    return {
        producer_name(i): (entries - 1 - i) // producers for i in range(min(producers, entries))
    }


def add_dedup_cursor(directory: Path, entries: int, producers: int, snapshot: bool) -> None:
    """The ``pulsar.dedup`` cursor: at the last entry with the snapshot, or at the start."""
    ledger = Ledger.open(directory, LedgerConfig(sync_data=True))
    try:
        cursor = ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Earliest)
        if snapshot:
            last = ledger.last_confirmed_position
            assert last is not None
            cursor.mark_delete(last, highest_sequence_ids(entries, producers))
        cursor.persist()
    finally:
        ledger.close()


def copy_topic(source_data_dir: Path, target_data_dir: Path) -> None:
    shutil.copytree(source_data_dir, target_data_dir)
