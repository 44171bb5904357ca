"""The sink's send side: per target, the batch in progress, handed to the client whole.

The exactly-once sink decides where batches end (``batches.BatchCutter``: a pure function of
the row sequence) and sends each complete batch with the client's bulk path
(``Producer.send_rows``): the rows go as columns, straight into one batch entry whose
sequence id is its first row's and highest sequence id its last row's, with one completion
for the whole batch. No message object, future or callback per row.

``TargetBatch.feed`` takes rows of a ``rows.Columns`` chunk (a range of them for the usual
single target, an index list when rows are routed to several partitions), cuts them with the
target's cutter and sends the batches they complete; the rest waits for the next chunk (a
batch can span chunks: the cuts do not depend on how the rows were chunked). Sequence ids stay
a first id while they are consecutive (one target) and become an explicit list otherwise.

**Several batches per call.** Consecutive complete batches of the same row count (rows of
one size make every batch alike) go to the client in one ``send_rows`` call of up to
``group_batches`` batches, with ``max_messages`` set to that count, so the client cuts the
call's rows into exactly those batches: the same entries as one call per batch, for a tenth
of the per-call work (a call costs a slot acquisition, a hand-over to the client's loop
thread, a socket write and a completion; measured: 101 calls for 100k rows of 100 B took
about 10 ms more of the worker's CPU than 13 calls). A batch of another length ends the
group; ``send``/``send_complete`` hand over what is held. Which batches share a call is
itself a pure function of the batch lengths, so even an entry the client would cut (larger
than its byte bound, which the sink's own byte cut keeps far away) is cut alike on a replay.

``Receipts`` counts what the broker answered, per message (the at-least-once sink's
``send_async`` callbacks) or per call (``send_rows``), from the client's loop thread.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from client.errors import Result
from client.message_id import MessageId
from client.producer.bulk import BulkReceipt
from client.sync import Producer
from spark_connector.batches import BatchCutter
from spark_connector.rows import Columns

__all__ = ["GROUP_BATCHES", "Receipts", "TargetBatch"]

Rows = range | list[int]
# Complete batches of one length handed to the client in one ``send_rows`` call, at most. The
# call takes its rows' queue slots at once and frees them with its last receipt, so a group is
# at most the sink's in-flight bound (``sink._IN_FLIGHT_BATCHES``): with the client's overdraw
# rule (a call waits only until one slot is free) two groups are in flight.
GROUP_BATCHES = 8


class Receipts:
    """Counts receipts from the client's loop thread; remembers the first failure."""

    def __init__(self) -> None:
        self.stored = 0
        self.duplicates = 0
        self.error: str | None = None
        self._lock = threading.Lock()

    def __call__(self, result: Result, message_id: MessageId | None) -> None:
        with self._lock:
            if result != Result.Ok or message_id is None:
                self._fail(result)
            elif message_id.entry_id() < 0:
                self.duplicates += 1  # PIP-6 duplicate: already stored by an earlier attempt
            else:
                self.stored += 1

    def rows(self, result: Result, receipt: BulkReceipt | None) -> None:
        """A ``send_rows`` call's outcome."""
        with self._lock:
            if result != Result.Ok or receipt is None:
                self._fail(result)
                return
            stored = receipt.stored_rows
            self.stored += stored
            self.duplicates += sum(receipt.rows) - stored

    def _fail(self, result: Result) -> None:
        if self.error is None:
            self.error = f"send failed: {result!r}"


class TargetBatch:
    """A target (topic or partition) the task writes to: its producer and batch in progress."""

    __slots__ = (
        "complete",
        "cutter",
        "events",
        "first_id",
        "group_batches",
        "held",
        "ids",
        "keys",
        "length",
        "next_id",
        "producer",
        "properties",
        "receipts",
        "values",
    )

    def __init__(
        self,
        producer: Producer,
        cutter: BatchCutter,
        receipts: Receipts,
        group_batches: int = GROUP_BATCHES,
    ) -> None:
        self.producer = producer
        self.cutter = cutter
        self.receipts = receipts
        self.group_batches = group_batches
        self._clear()

    def _clear(self) -> None:
        self.values: list[bytes | None] = []
        self.keys: list[str | None] | None = None
        self.properties: list[Any] | None = None
        self.events: list[int | None] | None = None
        self.first_id = 0
        self.next_id = 0
        self.ids: list[int] | None = None  # None: first_id, first_id + 1, ...
        # The first ``complete`` rows held are ``held`` complete batches of ``length`` rows
        # each, not handed over yet; the rows after them are the batch in progress.
        self.complete = 0
        self.held = 0
        self.length = 0

    def feed(self, columns: Columns, rows: Rows, id0: int) -> None:
        """Queue ``rows`` of ``columns`` (row ``r`` has sequence id ``id0 + r``) and send the
        batches they complete (a group at a time: see the module docstring)."""
        sizes: Sequence[int] = columns.sizes
        uniform = columns.uniform
        if not (isinstance(rows, range) and len(rows) == columns.count):
            sizes = [uniform] * len(rows) if uniform is not None else [sizes[r] for r in rows]
        begin = 0
        for end in self.cutter.split(sizes, uniform):
            self._take(columns, rows[begin:end], id0)
            self._completed()
            begin = end
        self._take(columns, rows[begin:], id0)

    def _completed(self) -> None:
        """The rows held after the complete ones form one more complete batch: join it to the
        group held (handing the group over first if the batch is of another length) and hand
        the group over once it has ``group_batches`` batches."""
        length = len(self.values) - self.complete
        if self.held and length != self.length:
            self.send_complete()
        self.length = length
        self.complete += length
        self.held += 1
        if self.held >= self.group_batches:
            self.send_complete()

    def send_complete(self) -> None:
        """Hand the complete batches held to the client (one call; the batch in progress
        stays)."""
        count = self.complete
        if not count:
            return
        values, keys, properties, events, ids = (
            self.values,
            self.keys,
            self.properties,
            self.events,
            self.ids,
        )
        whole = count == len(values)
        self.producer.send_rows(
            values if whole else values[:count],
            self.first_id,
            sequence_ids=None if ids is None else ids if whole else ids[:count],
            keys=None if keys is None else keys if whole else keys[:count],
            properties=None if properties is None else properties if whole else properties[:count],
            event_times=None if events is None else events if whole else events[:count],
            max_messages=self.length,
            callback=self.receipts.rows,
        )
        if whole:
            self._clear()
            return
        # The batch in progress stays: the columns lose their first ``count`` rows.
        self.values = values[count:]
        self.keys = None if keys is None else keys[count:]
        self.properties = None if properties is None else properties[count:]
        self.events = None if events is None else events[count:]
        if ids is None:
            self.first_id += count
        else:
            self.ids = ids[count:]
            self.first_id = self.ids[0]
        self.complete = self.held = self.length = 0

    def send(self) -> None:
        """Hand everything held to the client: the complete batches, then the batch in
        progress as one entry (nothing if empty)."""
        self.send_complete()
        if self.values:
            self._hand_over(self.first_id, len(self.values))

    def send_now(self, columns: Columns, rows: Rows, max_messages: int) -> None:
        """At-least-once: send ``rows`` at once, numbered by the producer and cut into entries
        of at most ``max_messages`` rows (and its byte limit) by the client."""
        self._take(columns, rows, 0)
        self._hand_over(None, max_messages)

    def _hand_over(self, first_id: int | None, max_messages: int) -> None:
        self.producer.send_rows(
            self.values,
            first_id,
            sequence_ids=self.ids if first_id is not None else None,
            keys=self.keys,
            properties=self.properties,
            event_times=self.events,
            max_messages=max_messages,
            callback=self.receipts.rows,
        )
        self._clear()

    def _take(self, columns: Columns, rows: Rows, id0: int) -> None:
        if not rows:
            return
        fresh = not self.values
        if isinstance(rows, range):
            self._take_range(columns, rows.start, rows.stop)
            first = id0 + rows.start
            if fresh:
                self.first_id, self.next_id = first, first + len(rows)
            elif self.ids is None and first == self.next_id:
                self.next_id += len(rows)
            else:
                self._explicit_ids().extend(range(first, first + len(rows)))
            return
        self.values += [columns.values[r] for r in rows]
        for name in ("keys", "properties", "events"):
            column = getattr(columns, name)
            if column is not None:
                mine = getattr(self, name)
                if mine is None:
                    mine = []
                    setattr(self, name, mine)
                mine += [column[r] for r in rows]
        if fresh:
            self.first_id = id0 + rows[0]
            self.ids = []
        self._explicit_ids().extend(id0 + r for r in rows)

    def _take_range(self, columns: Columns, begin: int, end: int) -> None:
        self.values += columns.values[begin:end]
        if columns.keys is not None:
            self.keys = (self.keys or []) + columns.keys[begin:end]
        if columns.properties is not None:
            self.properties = (self.properties or []) + columns.properties[begin:end]
        if columns.events is not None:
            self.events = (self.events or []) + columns.events[begin:end]

    def _explicit_ids(self) -> list[int]:
        if self.ids is None:
            self.ids = list(range(self.first_id, self.next_id))
        return self.ids
