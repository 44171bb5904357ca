"""Topic compaction (Pulsar's ``TwoPhaseCompactor``): the latest message per key survives.

Rules, as Pulsar's:

* The key is the message key (``partition_key``). A message without a key is always kept.
* A message with an empty payload (or ``null_value`` set) deletes its key: neither it nor any
  earlier message with that key is in the result.
* Batched entries are compacted per message: a batch keeps only its retained messages
  (re-encoded, and re-compressed with the batch's codec); a batch with none left disappears. An
  entry that keeps every message is copied byte for byte.
* Every retained entry keeps its original position (message id), so readers see the same ids on
  both sides of the compaction horizon.

Two phases over the same input (the previous view, then the log after its horizon up to the
new horizon, the last durable entry when compaction starts): phase one finds each key's latest
message, phase two writes what survives to a new view file (``broker.storage.compacted_view``). The
work is synchronous and runs in a disk thread (``broker/blocking.py``); ``TopicCompaction`` is
the event-loop side: status for the admin API, one run at a time, the ``__compaction`` cursor
that makes a new view the current one, and the size threshold that triggers a run by itself.

Departures from Pulsar, on purpose: chunked messages are kept as they are (never compacted
away); a batch's retained messages are renumbered (their batch index is their place in the
rewritten batch) instead of being kept in place with ``compacted_out`` set, because the official
C++ client delivers ``compacted_out`` messages as empty messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from broker.blocking import run_blocking, run_to_completion
from broker.errors import NotAllowed
from broker.storage import Ledger, Position
from broker.storage.compacted_view import (
    GENERATION_PROPERTY,
    CompactedView,
    load_view,
    open_view,
    remove_view,
    write_view,
)
from broker.storage.files import FileLayer
from protocol.batch import split_batch
from protocol.compression import decode as decompress
from protocol.compression import encode as compress
from protocol.enums import InitialPosition
from protocol.errors import RemoteProtocolError
from protocol.metadata import decode_entry, encode_entry
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)

#: The cursor that records the compaction horizon and the current view (Pulsar's name).
COMPACTION_CURSOR = "__compaction"

#: Test seam: the compaction pauses (forever) at this stage, after creating the file named by
#: ``TEST_MAGNETAR_COMPACTION_PAUSE_MARKER``, so a crash test can SIGKILL the broker there.
PAUSE_ENV = "TEST_MAGNETAR_COMPACTION_PAUSE"
PAUSE_MARKER_ENV = "TEST_MAGNETAR_COMPACTION_PAUSE_MARKER"
STAGES = ("phase-one", "writing", "before-rename", "after-rename", "after-cursor")

_Key = str


class CompactedTopic(Protocol):
    """What a compaction needs of its topic (``broker.topics.topic.Topic``), so the topic can
    own its compaction without the two modules importing each other."""

    name: TopicName
    ledger: Ledger
    compaction_threshold_bytes: int

    @property
    def closed(self) -> bool: ...

    @property
    def cursor_io(self) -> asyncio.Lock: ...

    def last_confirmed_position(self) -> Position: ...

    def on_compacted(self) -> None: ...


_MessageRef = tuple[Position, int]  # (entry position, batch index or -1)


class CompactionStatus(Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionInProgress(NotAllowed):
    """A second PUT .../compaction while one runs (REST: 409, as Pulsar)."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    horizon: Position
    keys: int
    entries_read: int
    bytes_read: int
    entries_written: int
    seconds: float


# ---------------------------------------------------------------------------- the algorithm


def _checkpoint(stage: str) -> None:
    if os.environ.get(PAUSE_ENV) != stage:
        return
    marker = os.environ.get(PAUSE_MARKER_ENV)
    if marker:
        Path(marker).write_text(stage)
    while True:  # until SIGKILLed: this is the crash point under test
        time.sleep(3600)


def _messages(entry: bytes) -> tuple[Any, list[tuple[Any, bytes]] | None, bytes]:
    """(metadata, batch records or None for a single message, payload as stored)."""
    metadata, payload = decode_entry(entry)
    if not metadata.HasField("num_messages_in_batch"):
        return metadata, None, payload
    plain = decompress(metadata.compression, payload, metadata.uncompressed_size)
    return metadata, split_batch(plain, metadata.num_messages_in_batch), payload


def _is_chunk(metadata: Any) -> bool:
    return bool(metadata.num_chunks_from_msg > 1)


def _single_is_null(metadata: Any, payload: bytes) -> bool:
    if metadata.null_value:
        return True
    size = metadata.uncompressed_size if metadata.compression else len(payload)
    return size == 0


def _scan(entries: Iterator[tuple[Position, bytes]]) -> Iterator[tuple[Position, bytes, Any]]:
    """Entries with their parsed metadata, skipping unreadable ones (as every reader does)."""
    for position, entry in entries:
        try:
            parsed = _messages(entry)
        except (RemoteProtocolError, ValueError) as exc:
            log.warning("compaction skips unreadable entry %s: %s", position, exc)
            continue
        yield position, entry, parsed


def phase_one(
    entries: Iterator[tuple[Position, bytes]],
) -> tuple[dict[_Key, _MessageRef], int, int]:
    """Each key's latest message (deleted keys absent), and how many entries and bytes were
    read."""
    latest: dict[_Key, _MessageRef] = {}
    read = 0
    count = 0
    for position, entry, (metadata, records, payload) in _scan(entries):
        read += len(entry)
        count += 1
        if _is_chunk(metadata):
            continue
        if records is None:
            if not metadata.HasField("partition_key"):
                continue
            if _single_is_null(metadata, payload):
                latest.pop(metadata.partition_key, None)
            else:
                latest[metadata.partition_key] = (position, -1)
            continue
        for index, (single, data) in enumerate(records):
            if not single.HasField("partition_key"):
                continue
            if single.null_value or not data:
                latest.pop(single.partition_key, None)
            else:
                latest[single.partition_key] = (position, index)
    return latest, count, read


def phase_two(
    entries: Iterator[tuple[Position, bytes]], latest: dict[_Key, _MessageRef]
) -> Iterator[tuple[Position, bytes]]:
    """What survives, in position order (batches rewritten to their retained messages)."""
    for position, entry, (metadata, records, _payload) in _scan(entries):
        if _is_chunk(metadata):
            yield position, entry
            continue
        if records is None:
            keyed = metadata.HasField("partition_key")
            if not keyed or latest.get(metadata.partition_key) == (position, -1):
                yield position, entry
            continue
        kept = [
            (single, data)
            for index, (single, data) in enumerate(records)
            if not single.HasField("partition_key")
            or latest.get(single.partition_key) == (position, index)
        ]
        if len(kept) == len(records):
            yield position, entry
        elif kept:
            yield position, _rebatch(metadata, kept)


def _rebatch(metadata: Any, kept: list[tuple[Any, bytes]]) -> bytes:
    parts: list[bytes] = []
    for single, data in kept:
        header = single.SerializeToString()
        parts += (len(header).to_bytes(4, "big"), header, data)
    plain = b"".join(parts)
    metadata.num_messages_in_batch = len(kept)
    metadata.uncompressed_size = len(plain)
    return encode_entry(metadata, compress(metadata.compression, plain))


def compaction_input(
    ledger: Ledger, view: CompactedView, horizon: Position
) -> Iterator[tuple[Position, bytes]]:
    """The previous view, then the log after its horizon up to ``horizon`` (Pulsar's phase
    one reads the ``__compaction`` subscription with readCompacted, which is the same)."""
    yield from view.iter_entries()
    if view.horizon.ledger_id >= 0:
        start = ledger.next_position(view.horizon)
    else:
        start = ledger.next_position(ledger.before_first_position())
    for position, entry in ledger.iter_entries(start):
        if position > horizon:
            return
        yield position, entry


def compact(
    ledger: Ledger,
    layer: FileLayer,
    view: CompactedView,
    horizon: Position,
    checkpoint: Callable[[str], None] = _checkpoint,
) -> tuple[CompactedView, CompactionReport]:
    """Both phases and the new view file (disk thread). The caller makes it current."""
    started = time.monotonic()
    latest, entries_read, bytes_read = phase_one(compaction_input(ledger, view, horizon))
    checkpoint("phase-one")
    generation = view.generation + 1
    written = 0

    def counted() -> Iterator[tuple[Position, bytes]]:
        nonlocal written
        for item in phase_two(compaction_input(ledger, view, horizon), latest):
            written += 1
            yield item

    path = write_view(layer, ledger.directory, generation, horizon, counted(), checkpoint)
    new_view = open_view(path, generation)
    report = CompactionReport(
        horizon=horizon,
        keys=len(latest),
        entries_read=entries_read,
        bytes_read=bytes_read,
        entries_written=written,
        seconds=time.monotonic() - started,
    )
    return new_view, report


# ---------------------------------------------------------------------------- the topic side


class TopicCompaction:
    """One topic's compaction: its current view, status, and runs (one at a time)."""

    def __init__(self, topic: CompactedTopic, layer: FileLayer) -> None:
        self._topic = topic
        self._layer = layer
        self._view: CompactedView | None = None
        self._load_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.status = CompactionStatus.NOT_RUN
        self.last_error: str | None = None
        self.last_report: CompactionReport | None = None
        self._last_succeeded_ms = 0
        self._last_failed_ms = 0

    @property
    def view(self) -> CompactedView | None:
        """The current view once loaded (`ready`), else None."""
        return self._view

    async def ready(self) -> CompactedView:
        """Load the view the ``__compaction`` cursor names (disk thread), once."""
        if self._view is not None:
            return self._view
        async with self._load_lock:
            if self._view is None:
                ledger = self._topic.ledger
                cursor = ledger.cursors.get(COMPACTION_CURSOR)
                generation = None if cursor is None else cursor.properties.get(GENERATION_PROPERTY)
                self._view = await run_blocking(
                    load_view, self._layer, ledger.directory, generation
                )
        return self._view

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(self) -> None:
        """Start a compaction (PUT .../compaction); refused while one runs."""
        if self.running:
            raise CompactionInProgress("Compaction already in progress")
        if self._topic.closed:
            raise NotAllowed("Topic is closing")
        self.status = CompactionStatus.RUNNING
        self.last_error = None
        self._task = asyncio.create_task(
            self._run(), name=f"compaction {self._topic.name.full_name}"
        )

    async def wait(self) -> None:
        """Until the current run (if any) ends."""
        task = self._task
        if task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(task)

    async def _run(self) -> None:
        try:
            await self._compact()
        except Exception as exc:
            self.status = CompactionStatus.ERROR
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._last_failed_ms = int(time.time() * 1000)
            log.exception("%s: compaction failed", self._topic.name.full_name)
        else:
            self.status = CompactionStatus.SUCCESS
            self._last_succeeded_ms = int(time.time() * 1000)

    async def _compact(self) -> None:
        topic = self._topic
        old = await self.ready()
        horizon = topic.last_confirmed_position()
        if horizon.entry_id < 0 or horizon <= old.horizon:
            return  # nothing new since the last compaction
        new, report = await run_blocking(compact, topic.ledger, self._layer, old, horizon)
        await run_blocking(_checkpoint, "after-rename")
        async with topic.cursor_io:
            ledger = topic.ledger
            cursor = ledger.cursors.get(COMPACTION_CURSOR)
            if cursor is None:
                fresh = ledger.new_cursor(COMPACTION_CURSOR, InitialPosition.Earliest)
                await run_to_completion(fresh.persist)
                cursor = ledger.add_cursor(fresh)
            cursor.mark_delete(horizon, properties={GENERATION_PROPERTY: new.generation})
            await run_to_completion(cursor.persist)
        # From here on the new view is the topic's (a crash now loads it).
        self._view = new
        self.last_report = report
        await run_blocking(_checkpoint, "after-cursor")
        if old.generation > 0:
            with contextlib.suppress(OSError):
                await run_blocking(remove_view, self._layer, topic.ledger.directory, old.generation)
        log.info(
            "%s: compacted up to %s: %d keys, %d of %d entries kept, %.3f s",
            topic.name.full_name,
            horizon,
            report.keys,
            report.entries_written,
            report.entries_read,
            report.seconds,
        )
        topic.on_compacted()

    def uncompacted_bytes(self) -> int:
        """Estimated bytes of the log after the horizon (Pulsar: the ``__compaction`` cursor's
        backlog size), from the entry count and the ledger's average entry size."""
        ledger = self._topic.ledger
        last = ledger.last_confirmed_position
        if last is None:
            return 0
        cursor = ledger.cursors.get(COMPACTION_CURSOR)
        start = (
            ledger.next_position(ledger.before_first_position())
            if cursor is None
            else ledger.next_position(cursor.mark_delete_position)
        )
        if start > last:
            return 0
        stats = ledger.stats()
        if stats["stored_entries"] <= 0:
            return 0
        entries = ledger.entry_count_between(start, last)
        return entries * stats["stored_bytes"] // stats["stored_entries"]

    def maybe_trigger(self, threshold_bytes: int) -> bool:
        """Start a run when the uncompacted backlog passes ``threshold_bytes`` (> 0)."""
        if threshold_bytes <= 0 or self.running or self._topic.closed:
            return False
        if self.uncompacted_bytes() < threshold_bytes:
            return False
        self.trigger()
        return True

    async def close(self) -> None:
        """Topic unload: let a run finish (its disk work cannot be interrupted)."""
        await self.wait()

    def abandon(self) -> None:
        """Test hook (kill -9): stop caring about a run in progress."""
        if self._task is not None:
            self._task.cancel()

    def stats_json(self) -> dict[str, Any]:
        """The ``compaction`` section of the topic stats (Pulsar's ``CompactionStats`` names;
        "events" are entries here), plus the horizon of the current view."""
        report = self.last_report
        view = self._view
        return {
            "lastCompactionRemovedEventCount": (
                report.entries_read - report.entries_written if report is not None else 0
            ),
            "lastCompactionSucceedTimestamp": self._last_succeeded_ms,
            "lastCompactionFailedTimestamp": self._last_failed_ms,
            "lastCompactionDurationTimeInMills": (
                round(report.seconds * 1000) if report is not None else 0
            ),
            "compactionHorizon": (
                f"{view.horizon.ledger_id}:{view.horizon.entry_id}"
                if view is not None and view.horizon.ledger_id >= 0
                else None
            ),
        }

    def status_json(self) -> dict[str, Any]:
        """Pulsar's ``LongRunningProcessStatus`` JSON."""
        return {"status": self.status.value, "lastError": self.last_error or ""}
