"""The replay guard: a recomputed task must put, at the index an earlier attempt stopped at, the
row that attempt stored there; otherwise the sink fails loudly instead of losing rows.

Sorting (``row_order``) makes the numbering a pure function of the task's rows, but not of a
set that itself changed (a nondeterministic upstream: ``rand()``, ``current_timestamp()``, a
source that is not replayable), nor of a second write reusing the identity of a first one (two
writes to one topic in a ``foreachBatch`` micro-batch without their own ``writeId``). Then the
new attempt's row ``i`` is not the row stored under sequence id ``i``: the broker would drop
the new rows up to the old last id as duplicates and store the rest, silently.

So, for each producer, the broker's ``last_sequence_id`` (PRODUCER_SUCCESS) tells whether an
earlier attempt of this very batch stored rows, and up to which index ``i``. The guard reads
that message back (the last one of this producer, near the topic's end) and checks, before the
task sends anything past ``i`` to that producer, that its own row ``i`` goes to the same topic
with the same content. Rows at or below ``i`` are duplicates the broker drops, so nothing is
stored before the check. The guard sees one row per producer: an earlier attempt's rows before
its last one are not compared (a set that differs only there goes unnoticed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from client.errors import Timeout
from client.message import Message
from client.message_id import MessageId
from client.sync import Client, Reader
from spark_connector.rows import SinkRow

__all__ = ["ReplayGuard", "ReplayMismatch", "find_stored", "same_message"]

_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1
_FIRST_WINDOW_ENTRIES = 256


class ReplayMismatch(RuntimeError):
    """A recomputed task would write other rows than an earlier attempt of the same batch."""


def same_message(stored: Message, row: SinkRow) -> bool:
    """Whether ``stored`` is what ``row`` sends (value, key, properties, event time)."""
    return (
        stored.data() == (row.value or b"")
        and (stored.partition_key() or None) == row.key
        and stored.properties() == (row.properties or {})
        and (stored.event_timestamp() or None) == row.event_time
    )


def find_stored(
    client: Client, topic: str, producer_name: str, sequence_id: int, timeout_ms: int
) -> Message | None:
    """The message ``producer_name`` stored under ``sequence_id`` on ``topic``, or None.

    The broker can report a producer's last sequence id a moment before a reader sees its
    message (the earlier attempt's last sends were still landing when it failed), so a search
    that comes back empty is repeated until ``timeout_ms`` has passed.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    pause = 0.05
    while True:
        found = _search(client, topic, producer_name, sequence_id, timeout_ms)
        if found is not None or time.monotonic() + pause > deadline:
            return found
        time.sleep(pause)
        pause = min(2 * pause, 1.0)


def _search(
    client: Client, topic: str, producer_name: str, sequence_id: int, timeout_ms: int
) -> Message | None:
    """One search: it was that producer's last message, so it sits near the end; read windows
    of entries ending at the topic's last message, growing back, the whole topic at worst."""
    window = _FIRST_WINDOW_ENTRIES
    while True:
        reader = client.create_reader(topic, MessageId.earliest)
        try:
            last = reader.get_last_message_id()
            if last.entry_id() < 0:
                return None
            first_entry = last.entry_id() - window
            if first_entry >= 0:
                reader.close()
                reader = client.create_reader(
                    topic,
                    MessageId(-1, last.ledger_id(), first_entry, -1),
                    start_message_id_inclusive=True,
                )
            found = _scan(reader, last, producer_name, sequence_id, timeout_ms)
        finally:
            reader.close()
        if found is not None or first_entry < 0:
            return found
        window *= 4


def _scan(
    reader: Reader, last: MessageId, producer_name: str, sequence_id: int, timeout_ms: int
) -> Message | None:
    end = (last.ledger_id(), last.entry_id())
    found = None
    while True:
        try:
            message = reader.read_next(timeout_ms)
        except Timeout:
            return found
        if message.producer_name() == producer_name and message.sequence_id() == sequence_id:
            found = message
        mid = message.message_id()
        # Done after the last entry's last message (a batch entry holds several).
        whole = mid.batch_index() < 0 or mid.batch_index() >= mid.batch_size() - 1
        if (mid.ledger_id(), mid.entry_id()) >= end and whole:
            return found


@dataclass(frozen=True, slots=True)
class _Expected:
    topic: str
    stored: Message
    sequence_id: int


class ReplayGuard:
    """One task's checks against what earlier attempts of its batch stored."""

    def __init__(self, client: Client, batch_id: int, producer_name: str, timeout_ms: int) -> None:
        self.client = client
        self.batch_id = batch_id
        self.producer_name = producer_name
        self.timeout_ms = timeout_ms
        self._expected: dict[int, _Expected] = {}

    def producer_ready(self, topic: str, last_sequence_id: int, index: int, row: SinkRow) -> None:
        """A producer on ``topic`` opened for the task's row ``index`` (the first it sends
        there), reporting ``last_sequence_id``.

        Raises:
            ReplayMismatch: the earlier attempt's last row there is not this attempt's.
        """
        if last_sequence_id < 0 or last_sequence_id >> _ROW_BITS != self.batch_id:
            return  # nothing of this batch stored yet: a first attempt
        stored_index = last_sequence_id & _ROW_MASK
        stored = find_stored(
            self.client, topic, self.producer_name, last_sequence_id, self.timeout_ms
        )
        if stored is None:
            raise ReplayMismatch(
                f"dedup-topic sink: producer {self.producer_name!r} stored sequence id "
                f"{last_sequence_id} on {topic} (row {stored_index} of batch {self.batch_id}) "
                "but that message cannot be read back (deleted or trimmed), so this attempt "
                "cannot be checked against it."
            )
        if stored_index < index:
            self._fail(topic, stored_index, stored, "sends it to another topic or partition")
        self._expected[stored_index] = _Expected(topic, stored, last_sequence_id)
        self.check(index, topic, row)

    @property
    def expecting(self) -> bool:
        """Whether a row is still to be compared (the write loop builds a ``SinkRow`` for
        ``check`` only then)."""
        return bool(self._expected)

    def check(self, index: int, topic: str, row: SinkRow) -> None:
        """Before row ``index`` is queued for ``topic``.

        Raises:
            ReplayMismatch: an earlier attempt stored another row at this index.
        """
        if not self._expected:
            return
        expected = self._expected.pop(index, None)
        if expected is None:
            return
        if expected.topic != topic:
            self._fail(expected.topic, index, expected.stored, f"sends it to {topic}")
        if not same_message(expected.stored, row):
            self._fail(topic, index, expected.stored, "has another row there")

    def finish(self, rows: int) -> None:
        """After the task's last row (before its last batches are sent).

        Raises:
            ReplayMismatch: an earlier attempt stored more rows than this one has.
        """
        for index, expected in sorted(self._expected.items()):
            self._fail(expected.topic, index, expected.stored, f"has only {rows} rows")

    def _fail(self, topic: str, index: int, stored: Message, what: str) -> None:
        raise ReplayMismatch(
            f"dedup-topic sink: an earlier attempt of batch {self.batch_id} stored row {index} "
            f"(sequence id {stored.sequence_id()}, message {stored.message_id()}) on {topic} "
            f"through producer {self.producer_name!r}, and this attempt {what}. The task's "
            "rows differ from the earlier attempt's: the input of the batch is not "
            "deterministic (rand(), current_timestamp(), a source that is not replayable), or "
            "two writes to this topic in one micro-batch (foreachBatch) share an identity (give "
            "each its own writeId). Writing on would lose some rows and duplicate others, so "
            "the task fails instead."
        )
