"""The sink: exactly-once writes through the broker's PIP-6 dedup (reference §2.1).

Each Spark task writes through producers named ``<prefix>-<writer>-<sparkPartitionId>`` (one per
target topic; names are per topic), where ``<writer>`` is the streaming query's id (stable
across restarts from one checkpoint). The task first puts its rows in an order that depends only
on the set of rows (``row_order``: sorted, spilling to disk past ``exactlyOnce.sortBufferBytes``)
and numbers row ``i`` of micro-batch ``b`` with sequence id ``(b << 32) | i``. Batch ids only
grow, so each producer's ids grow across batches and runs. A task retry, a replay after a
restart or a second ``commit`` regenerates the same ``(producer, sequence id) -> row`` pairs,
whatever order Spark hands the rows in (a shuffle's fetch order changes on a retry), and the
broker drops every id at or below the producer's highest stored one: the output holds each row
once. A duplicate receipt (id ``-1:-1``) counts as success.

* **Replay guard** (``replay_guard``): when a producer reports a last sequence id inside the
  batch being written, an earlier attempt stored rows; the task reads that last row back and
  fails with ``ReplayMismatch`` unless its own row at that index is the same (a set that
  changed on recomputation would otherwise lose rows and duplicate others, silently).
* **No silent expiry** (``replay_age``): a producer the broker does not know (last sequence id
  -1) in a micro-batch older than ``brokerDeduplicationProducerInactivityTimeoutMinutes``: the
  broker may have forgotten what an earlier attempt stored; ``DedupStateExpired``.
* **Checkpoint-reset guard**: a producer whose ``last_sequence_id`` is already at or above
  ``(b + 1) << 32`` has output of a *later* batch: the checkpoint was reset while its query id was
  kept. Everything would be dropped as duplicates, silently; the task fails with a clear error.
* **ProducerBusy** (a zombie attempt of the same task still holds the name): retried with backoff
  for ``producerBusyTimeoutMs``, then the task fails (Spark retries it).
* **Unknown dedup status** (SEND_ERROR, connection loss, broker restart): the client's producer
  reconnects and resends the *same* sequence ids in order (``client.producer``), never skipping
  one; after ``sendTimeoutMs`` the task fails and its retry resends them again.
* ``write()`` returns only after every receipt (``flush``), which is what lets Spark commit.
* **Batching** stays exact: the sink cuts the batches itself (``batches``: ``batchingMaxMessages``
  rows, fewer when ``batchingMaxBytes`` would be passed; never on a timer) and hands a batch to
  the client only when complete (consecutive complete batches of one length in one call, which
  the client cuts at the same places: ``sink_send``). Boundaries are a pure function of the
  task's row sequence, so a replay forms the same batches and each batch entry is stored whole
  or dropped whole as a duplicate (the broker's dedup compares a batch's first and last
  sequence ids). Several complete batches may be in flight at once (``_IN_FLIGHT_BATCHES``):
  that changes only how many whole batches a failed attempt leaves stored.

**Batch writes** (``df.write``) have no query or batch id: batch id 0 and the ``writeId`` option
(random per write when unset) stand in; re-running a write with the same ``writeId`` writes
nothing new. **Inside ``foreachBatch``** a batch write's tasks carry the micro-batch's query and
batch ids (Spark's local properties), so the write takes them: ``<writer>`` is the query id, or
``<queryId>-<writeId>`` when ``writeId`` is given, which each write to one topic in one
micro-batch needs (the guard fails a second write that reuses the first one's identity).

**Partitioned output topics**: each task writes to partition ``i`` through a producer on its
``-partition-i`` topic, with the same producer name on every partition (as Pulsar's partitioned
producer) and the row's sequence id, so dedup holds per partition (a partition sees an
increasing subsequence of the task's ids). The partition of a row is a pure function of the row
(``route``): the ``partition`` column when set, else Pulsar's ``Murmur3_32Hash`` of the key, else
round-robin by blocks of ``batchingMaxMessages`` rows (one per row without batching) starting at
the Spark partition id, so a replay routes every row where its first attempt did.

Requirements (documented in the README): a recomputed Spark partition must hold the same rows
(in any order); the output topic must keep its partitioning while a batch is uncommitted.

``exactlyOnce=false``: plain at-least-once producers (broker-chosen names, automatic ids), rows in
input order; they stay open across tasks in the worker (``producer_cache``).

Speed: rows arrive as Arrow record batches, are sorted on their Arrow columns (``row_order``:
a compiled hash of the value first) and turned into one Python list per column
(``rows.Columns``); batches are cut by bisection on running byte totals (``batches``) and
sent whole, consecutive batches of one length in one ``send_rows`` call (``sink_send``). A
``SinkRow`` is built only for a row the replay guard compares. ``compressionType`` sets the
producers' codec. No exactly-once row can be sent before the task's last row has arrived (the
numbering needs them all), so the producer is created while they arrive (``early_producer``)
and only the sort's last step stays between the last row in and the first batch out. The
batches the sort held are handed on (``carry_over``) so the next task's land in their pages.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from client.errors import ProducerBusy
from client.sync import Client, Producer
from protocol.enums import CompressionType
from spark_connector.batches import BatchCutter
from spark_connector.carry_over import carry_over
from spark_connector.clients import partition_topics, shared_client
from spark_connector.early_producer import EarlyProducer
from spark_connector.faults import commit_fault, row_fault
from spark_connector.options import OptionError, SinkOptions, canonical_topic
from spark_connector.producer_cache import shared_producers
from spark_connector.replay_age import batch_timestamp_ms, check_replay_age
from spark_connector.replay_guard import ReplayGuard
from spark_connector.row_order import ArrowSorter
from spark_connector.rows import Columns
from spark_connector.sink_identity import (
    ROW_BITS,
    CheckpointReset,
    TaskIdentity,
    check_not_reset,
    route,
    sequence_id,
)
from spark_connector.sink_send import Receipts, TargetBatch

__all__ = [
    "BatchWriter",
    "CheckpointReset",
    "SinkCommit",
    "StreamWriter",
    "route",
    "sequence_id",
]

logger = logging.getLogger(__name__)

_NO_TIMER_MS = 24 * 3600 * 1000
# Whole batches a producer may have in flight (at least; ``maxPendingMessages`` may allow
# more). Two kept the exactly-once sink waiting on receipts (the broker syncs each entry to
# disk before answering) at half the speed of eight. More in flight is as exact: every batch
# is one entry with fixed cuts and ids, the client resends unanswered entries in order on
# one connection, and the broker drops an entry whose ids it stored (PIP-6); a task that
# fails leaves only whole batches stored, which a replay drops whole.
_IN_FLIGHT_BATCHES = 8
_ROW_BITS = ROW_BITS
RowHook = Callable[[int, Callable[[], None]], None]
# ``compressionType`` -> the codec of the producer's entries (a whole batch is compressed).
COMPRESSION = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLIB,
    "zstd": CompressionType.ZSTD,
    "snappy": CompressionType.SNAPPY,
}


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task wrote (logged by the driver; nothing to undo on abort)."""

    partition: int
    attempt: int
    batch_id: int
    producer: str | None
    rows: int
    stored: int
    duplicates: int


class _TaskWriter:
    """One task's producers and its write loop (column-wise: ``rows.Columns``)."""

    def __init__(
        self,
        options: SinkOptions,
        plan: dict[str, int],
        task: TaskIdentity,
        order: Sequence[int] = (),
    ) -> None:
        self.options = options
        self.plan = plan
        self.order = order
        self.task = task
        self.client: Client = shared_client(options.service_url, options.client_options)
        self.receipts = Receipts()
        self.open: dict[str, TargetBatch] = {}
        self.leased: dict[str, tuple[Hashable, Producer]] = {}
        self.guard: ReplayGuard | None = None
        name = self.producer_name
        if name is not None:
            self.guard = ReplayGuard(self.client, task.batch_id, name, options.send_timeout_ms)
        self._topics: dict[str, str] = {}
        self._partitions: dict[str, tuple[list[str], int]] = {}
        self._batch_started_ms: int | None = None
        # Exactly-once: the producer is created while the rows arrive (``early_producer``).
        self.early = EarlyProducer(self._open_single) if options.exactly_once else None

    @property
    def producer_name(self) -> str | None:
        if not self.options.exactly_once:
            return None
        task = self.task
        return f"{self.options.producer_name_prefix}-{task.writer_id}-{task.partition}"

    # --- producers ----------------------------------------------------------------------

    def _producer_settings(self) -> dict[str, Any]:
        options = self.options
        batch_messages = options.batching_max_messages
        exactly_once = options.exactly_once
        return {
            "send_timeout_millis": options.send_timeout_ms,
            # Room for several whole batches in flight (see ``_IN_FLIGHT_BATCHES``).
            "max_pending_messages": max(
                options.max_pending_messages, _IN_FLIGHT_BATCHES * batch_messages
            ),
            "block_if_queue_full": True,
            "batching_enabled": options.batching_enabled,
            "batching_max_messages": batch_messages,
            # The exactly-once sink cuts batches itself (``batches``): the client's size
            # trigger must never cut first, nor its timer.
            "batching_max_allowed_size_in_bytes": (
                4 * options.batching_max_bytes + (1 << 16)
                if exactly_once
                else options.batching_max_bytes
            ),
            "batching_max_publish_delay_ms": _NO_TIMER_MS if exactly_once else 10,
            "compression_type": COMPRESSION[options.compression_type],
            # A record schema's rows are encoded already: the producer only declares it.
            **({"schema": options.encoding.producer_schema} if options.encoding else {}),
        }

    def _create(self, topic: str, settings: dict[str, Any]) -> Producer:
        options = self.options
        deadline = time.monotonic() + options.producer_busy_timeout_ms / 1000
        pause = 0.05
        while True:
            try:
                return self.client.create_producer(
                    topic, producer_name=self.producer_name, **settings
                )
            except ProducerBusy:
                if time.monotonic() > deadline:
                    raise
                logger.info("producer %s is busy (zombie attempt?); retrying", self.producer_name)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _open_single(self) -> tuple[str, Producer] | None:
        """The one target of every row and its producer, newly created; None when rows may
        go to several targets (run on ``early_producer``'s helper thread)."""
        option = self.options.topic
        if option is None or "partition" in self.plan:
            return None
        names, partitions = self._partitioning(option)
        if partitions:
            return None
        return names[0], self._create(names[0], self._producer_settings())

    def _open_target(self, target: str, index: int, columns: Columns, i: int) -> TargetBatch:
        """The producer for ``target``, opened for row ``index`` (the first routed there), and
        the checks against what the broker already holds for it."""
        options = self.options
        settings = self._producer_settings()
        if options.exactly_once:
            producer = self.early.take(target) if self.early is not None else None
            if producer is None:
                producer = self._create(target, settings)
            self.open[target] = opened = self._new_open(producer)
            last = producer.last_sequence_id()
            check_not_reset(last, self.task.batch_id, producer.producer_name())
            if last < 0:
                self._check_not_forgotten(producer.producer_name())
            assert self.guard is not None
            self.guard.producer_ready(target, last, index, columns.row(i))
            return opened
        key = (
            options.service_url,
            tuple(sorted(options.client_options.items())),
            target,
            tuple(sorted(settings.items())),
        )
        producer = shared_producers.lease(key, lambda: self._create(target, settings))
        self.leased[target] = (key, producer)
        self.open[target] = opened = self._new_open(producer)
        return opened

    def _new_open(self, producer: Producer) -> TargetBatch:
        options = self.options
        cutter = BatchCutter(
            options.batching_max_messages if options.batching_enabled else 1,
            options.batching_max_bytes,
        )
        return TargetBatch(producer, cutter, self.receipts)

    def _check_not_forgotten(self, producer_name: str) -> None:
        """The broker does not know the producer: refuse if it may have forgotten it."""
        options, task = self.options, self.task
        checkpoint = options.checkpoint_location
        if options.dedup_timeout_minutes <= 0 or not task.micro_batch or checkpoint is None:
            return
        if self._batch_started_ms is None:
            self._batch_started_ms = batch_timestamp_ms(checkpoint, task.batch_id)
        check_replay_age(
            self._batch_started_ms, options.dedup_timeout_minutes, task.batch_id, producer_name
        )

    # --- routing ------------------------------------------------------------------------

    def topic_of(self, name: str | None) -> str:
        option = self.options.topic
        if option is not None:
            return option
        if not name:
            raise OptionError("dedup-topic sink: a row has a null 'topic' and no topic option")
        found = self._topics.get(name)
        if found is None:
            found = self._topics[name] = canonical_topic(name)
        return found

    def _partitioning(self, topic: str) -> tuple[list[str], int]:
        found = self._partitions.get(topic)
        if found is None:
            names, partitioned = partition_topics(self.client, topic)
            found = self._partitions[topic] = (names, len(names) if partitioned else 0)
        return found

    def single_target(self, columns: Columns) -> str | None:
        """The one target of every row of ``columns`` (the ``topic`` option naming a topic
        that is not partitioned, no ``partition`` column), else None."""
        option = self.options.topic
        if option is None or columns.partitions is not None:
            return None
        names, partitions = self._partitioning(option)
        return names[0] if partitions == 0 else None

    def targets(self, columns: Columns, start: int) -> list[str]:
        """The topic (``topic`` or one of its partitions) of each row; row ``i`` of
        ``columns`` is the task's row ``start + i``."""
        option = self.options.topic
        if option is not None and columns.partitions is None:
            names, partitions = self._partitioning(option)
            if partitions == 0:
                return [names[0]] * columns.count  # the common case: one target
        options = self.options
        block = options.batching_max_messages if options.batching_enabled else 1
        topics, parts, keys = columns.topics, columns.partitions, columns.keys
        out = []
        for i in range(columns.count):
            topic = self.topic_of(topics[i] if topics is not None else None)
            names, partitions = self._partitioning(topic)
            index = route(
                parts[i] if parts is not None else None,
                keys[i] if keys is not None else None,
                start + i,
                partitions,
                block,
                self.task.partition,
            )
            out.append(names[index])
        return out

    # --- the write loop -----------------------------------------------------------------

    def chunks(
        self, batches: Iterator[pa.RecordBatch], sorter: ArrowSorter | None
    ) -> Iterator[Columns]:
        """The task's rows: in input order, or (exactly-once) in ``row_order``'s order."""
        plan = self.plan
        if sorter is None:
            return (Columns(batch, plan) for batch in carry_over.passing(batches) if batch.num_rows)
        for batch in batches:
            sorter.add(batch)
        return (columns for columns in sorter.sorted_columns() if columns.count)

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        task, options = self.task, self.options
        sorter = (
            ArrowSorter(self.plan, self.order, options.sort_buffer_bytes)
            if options.exactly_once
            else None
        )
        rows = 0
        failed = True
        if options.encoding is not None:  # the topic's record schema (schema_write)
            batches = options.encoding.encode(batches)
        if self.early is not None:
            batches = self.early.watch(batches)
        try:
            chunks = self.chunks(batches, sorter)
            if self.early is not None:
                self.early.wait()  # it also looked the topic up (``_partitioning``)
            # After the sort: a fault counts rows as they are sent.
            hook = row_fault(options.fault_dir, task.batch_id, task.partition)
            for columns in chunks:
                if options.exactly_once:
                    rows = self._queue(columns, rows, hook)
                else:
                    rows = self._send_now(columns, rows, hook)
            if self.guard is not None:
                self.guard.finish(rows)
            for opened in self.open.values():
                opened.send()
            self.flush()
            failed = False
        finally:
            # After a failure only whole batches were handed to the client, so closing (which
            # sends what the client holds) cannot store a batch a replay would cut elsewhere.
            self.close(failed)
            if sorter is not None:
                sorter.close()
        if self.receipts.error is not None:
            raise RuntimeError(f"dedup-topic sink: {self.receipts.error}")
        return SinkCommit(
            task.partition,
            task.attempt,
            task.batch_id,
            self.producer_name,
            rows,
            self.receipts.stored,
            self.receipts.duplicates,
        )

    def _queue(self, columns: Columns, start: int, hook: RowHook | None) -> int:
        """Exactly-once: number the rows from ``start``, check them against an earlier attempt
        (``replay_guard``) before any is sent, and feed them to their target's batch, which
        sends each batch it completes (``sink_send``). Returns the next row index."""
        if start + columns.count > 1 << _ROW_BITS:
            raise ValueError(f"a task of more than {1 << _ROW_BITS} rows")
        sequence_id(self.task.batch_id, 0)  # checks the batch id's range
        id0 = (self.task.batch_id << _ROW_BITS) + start  # row r's sequence id: id0 + r
        single = self.single_target(columns)
        if single is not None and hook is None:  # the common case: one topic, whole chunks
            opened = self.open.get(single)
            checked = 0
            if opened is None:
                opened = self._open_target(single, start, columns, 0)  # checks row 0
                checked = 1
            guard = self.guard
            for i in range(checked, columns.count):
                if guard is None or not guard.expecting:
                    break  # only a retry compares rows (with what an earlier attempt stored)
                guard.check(start + i, single, columns.row(i))
            opened.feed(columns, range(columns.count), id0)
            return start + columns.count
        targets = self.targets(columns, start)
        groups: dict[str, list[int]] = {}
        for i, target in enumerate(targets):
            self._check_row(columns, start, i, target)
            if hook is None:
                groups.setdefault(target, []).append(i)
            else:  # test faults count rows as they are queued: one row at a time
                self.open[target].feed(columns, [i], id0)
                hook(start + i + 1, self.flush)
        for target, rows in groups.items():
            self.open[target].feed(columns, rows, id0)
        return start + columns.count

    def _check_row(self, columns: Columns, start: int, i: int, target: str) -> None:
        """Open ``target`` at row ``i`` (its first row), or check row ``i`` (a retry)."""
        if target not in self.open:
            self._open_target(target, start + i, columns, i)
        elif self.guard is not None and self.guard.expecting:
            self.guard.check(start + i, target, columns.row(i))

    def _send_now(self, columns: Columns, start: int, hook: RowHook | None) -> int:
        """At-least-once: the rows in input order, each target's rows of the chunk in one bulk
        call (the producer numbers them; the client cuts the entries)."""
        if hook is not None:
            return self._send_each(columns, start, hook)
        single = self.single_target(columns)
        groups: dict[str, range | list[int]] = {}
        if single is not None:
            groups[single] = range(columns.count)
        else:
            lists: dict[str, list[int]] = {}
            for i, target in enumerate(self.targets(columns, start)):
                lists.setdefault(target, []).append(i)
            groups.update(lists)
        options = self.options
        max_messages = options.batching_max_messages if options.batching_enabled else 1
        for target, rows in groups.items():
            opened = self.open.get(target)
            if opened is None:
                opened = self._open_target(target, start + rows[0], columns, rows[0])
            opened.send_now(columns, rows, max_messages)
        return start + columns.count

    def _send_each(self, columns: Columns, start: int, hook: RowHook) -> int:
        """At-least-once under a test fault: each row at once, in input order."""
        targets = self.targets(columns, start)
        values, keys, events, properties = (
            columns.values,
            columns.keys,
            columns.events,
            columns.properties,
        )
        receipts, opened_of = self.receipts, self.open
        index = start
        for i in range(columns.count):
            target = targets[i]
            opened = opened_of.get(target)
            if opened is None:
                opened = self._open_target(target, index, columns, i)
            opened.producer.send_async(
                values[i],
                receipts,
                properties=properties[i] if properties is not None else None,
                partition_key=keys[i] if keys is not None else None,
                event_timestamp=events[i] if events is not None else None,
            )
            index += 1
            hook(index, self.flush)
        return index

    def flush(self) -> None:
        """Wait for the receipts of every complete batch (handed over first if still held in
        a group: ``sink_send``); a batch in progress stays unsent."""
        for opened in self.open.values():
            opened.send_complete()
            opened.producer.flush()

    def close(self, failed: bool) -> None:
        """Close the task's producers; a cached one goes back to the cache after a success."""
        if self.early is not None:
            self.early.discard()
        opened, self.open = self.open, {}
        leased, self.leased = self.leased, {}
        for target, state in opened.items():
            lease = leased.get(target)
            if lease is not None and not failed:
                shared_producers.give_back(*lease)
                continue
            producer = state.producer
            try:
                producer.close()
            except Exception:
                logger.warning(
                    "closing producer %s failed", producer.producer_name(), exc_info=True
                )


def _log_commit(kind: str, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    done = [m for m in messages if isinstance(m, SinkCommit)]
    logger.info(
        "dedup-topic sink %s batch %d: %d rows, %d stored, %d duplicates, %d failed tasks",
        kind,
        batch_id,
        sum(m.rows for m in done),
        sum(m.stored for m in done),
        sum(m.duplicates for m in done),
        len(messages) - len(done),
    )


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream``: one instance per micro-batch, pickled to the executors."""

    def __init__(
        self, options: SinkOptions, plan: dict[str, int], order: Sequence[int] = ()
    ) -> None:
        self.options = options
        self.plan = plan
        self.order = tuple(order)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = TaskIdentity.current(None, fallback_id="stream")
        return _TaskWriter(self.options, self.plan, task, self.order).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Idempotent (Spark may call it twice for one batch); the data is already stored.
        commit_fault(self.options.fault_dir, batchId)
        _log_commit("committed", messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Published messages cannot be retracted; a replay adds no duplicates.
        _log_commit("aborted", messages, batchId)


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: batch id 0 and ``writeId`` (random per write unless given); inside
    ``foreachBatch`` the micro-batch's query and batch ids (``TaskIdentity``)."""

    def __init__(
        self, options: SinkOptions, plan: dict[str, int], order: Sequence[int] = ()
    ) -> None:
        self.options = options
        self.plan = plan
        self.order = tuple(order)
        self.random_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = TaskIdentity.current(self.options.write_id, fallback_id=self.random_id)
        return _TaskWriter(self.options, self.plan, task, self.order).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_fault(self.options.fault_dir, 0)
        _log_commit("committed", messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("aborted", messages, 0)
