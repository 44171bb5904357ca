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
  the client only when complete. Boundaries are a pure function of the task's row sequence, so a
  replay forms the same batches and each batch entry is stored whole or dropped whole as a
  duplicate (the broker's dedup compares a batch's first and last sequence ids).

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
input order.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from client.errors import ProducerBusy, Result
from client.message_id import MessageId
from client.sync import Client, Producer
from protocol.hashing import murmur3_32_hash
from spark_connector.batches import BatchCutter, row_bytes
from spark_connector.clients import partition_topics, shared_client
from spark_connector.faults import commit_fault, row_fault
from spark_connector.options import OptionError, SinkOptions, canonical_topic
from spark_connector.replay_age import batch_timestamp_ms, check_replay_age
from spark_connector.replay_guard import ReplayGuard
from spark_connector.row_order import RowSorter
from spark_connector.rows import SinkRow, sink_rows

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
_ROW_BITS = 32


class CheckpointReset(RuntimeError):
    """The broker holds output of a later batch for this producer: the checkpoint was reset."""


def sequence_id(batch_id: int, row_index: int) -> int:
    """The sequence id of row ``row_index`` of micro-batch ``batch_id`` (pure).

    Raises:
        ValueError: a field out of range (``batch_id < 2^31``, ``row_index < 2^32``).
    """
    if not (0 <= batch_id < 1 << 31 and 0 <= row_index < 1 << _ROW_BITS):
        raise ValueError(f"batch {batch_id} / row {row_index} out of the sequence id range")
    return (batch_id << _ROW_BITS) | row_index


def check_not_reset(last_sequence_id: int, batch_id: int, producer_name: str) -> None:
    """The checkpoint-reset guard (pure).

    Raises:
        CheckpointReset: ``last_sequence_id`` belongs to a batch after ``batch_id``.
    """
    if last_sequence_id >= (batch_id + 1) << _ROW_BITS:
        raise CheckpointReset(
            f"producer {producer_name!r} already stored sequence id {last_sequence_id} "
            f"(batch {last_sequence_id >> _ROW_BITS}) but Spark is writing batch {batch_id}: the "
            "checkpoint was reset or reused with the same query id. Writing would drop every row "
            "as a duplicate. Use a new checkpoint location (new query id) or another "
            "producerNamePrefix."
        )


def route(
    partition: int | None,
    key: str | None,
    row_index: int,
    partitions: int,
    block: int,
    first: int = 0,
) -> int:
    """The partition index of a row of a topic with ``partitions`` partitions (pure).

    ``partitions == 0``: the topic is not partitioned, and only partition 0 (or none) exists.
    Rows with neither a partition nor a key go round-robin by blocks of ``block`` rows,
    starting at partition ``first`` (the Spark partition id, so tasks do not all start on
    partition 0).

    Raises:
        OptionError: ``partition`` names a partition the topic does not have.
    """
    if partition is not None:
        if not 0 <= partition < max(partitions, 1):
            what = f"has {partitions} partitions" if partitions else "is not partitioned"
            raise OptionError(
                f"dedup-topic sink: row {row_index} asks for partition {partition} but the "
                f"topic {what} (partition must be null or in [0, {max(partitions, 1)}))"
            )
        return partition
    if partitions <= 1:
        return 0
    if key is not None:
        return murmur3_32_hash(key.encode()) % partitions
    return (row_index // block + first) % partitions


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


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task writes as: ``writer_id`` names its producers, ``batch_id`` its ids' high half.

    ``micro_batch``: the task runs for a streaming micro-batch (the streaming sink, or a batch
    write inside ``foreachBatch``), whose start Spark recorded in the checkpoint.
    """

    batch_id: int
    writer_id: str
    partition: int
    attempt: int
    micro_batch: bool = False

    @classmethod
    def current(cls, write_id: str | None, fallback_id: str) -> TaskIdentity:
        """This task's identity: the streaming query's, joined with ``write_id`` (the
        ``writeId`` option) when given; outside a stream ``write_id`` or ``fallback_id``."""
        context = TaskContext.get()
        if context is None:  # pragma: no cover - write() always runs in a task
            return cls(0, write_id or fallback_id, 0, 0)
        batch = context.getLocalProperty("streaming.sql.batchId")
        query = context.getLocalProperty("sql.streaming.queryId")
        if query and batch is not None:
            writer = f"{query}-{write_id}" if write_id else query
            return cls(int(batch), writer, context.partitionId(), context.attemptNumber(), True)
        return cls(0, write_id or fallback_id, context.partitionId(), context.attemptNumber())


class _Receipts:
    """Counts receipts from the client's loop thread; remembers the first failure."""

    def __init__(self) -> None:
        self.stored = 0
        self.duplicates = 0
        self.error: str | None = None
        self._lock = threading.Lock()

    def __call__(self, result: Result, message_id: MessageId | None) -> None:
        with self._lock:
            if result != Result.Ok or message_id is None:
                if self.error is None:
                    self.error = f"send failed: {result!r}"
            elif message_id.entry_id() < 0:
                self.duplicates += 1  # PIP-6 duplicate: already stored by an earlier attempt
            else:
                self.stored += 1


class _TaskWriter:
    """One task's producers and its write loop."""

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
        self.producers: dict[str, Producer] = {}
        self.receipts = _Receipts()
        self.cutters: dict[str, BatchCutter] = {}
        self.pending: dict[str, list[tuple[SinkRow, int]]] = {}
        self.guard: ReplayGuard | None = None
        name = self.producer_name
        if name is not None:
            self.guard = ReplayGuard(self.client, task.batch_id, name, options.send_timeout_ms)
        self._topics: dict[str, str] = {}
        self._partitions: dict[str, tuple[list[str], int]] = {}
        self._batch_started_ms: int | None = None

    @property
    def producer_name(self) -> str | None:
        if not self.options.exactly_once:
            return None
        task = self.task
        return f"{self.options.producer_name_prefix}-{task.writer_id}-{task.partition}"

    def producer(self, topic: str) -> Producer:
        found = self.producers.get(topic)
        if found is None:
            found = self._create(topic)
            if self.options.exactly_once:
                check_not_reset(found.last_sequence_id(), self.task.batch_id, found.producer_name())
            self.producers[topic] = found
        return found

    def _create(self, topic: str) -> Producer:
        options = self.options
        batch_messages = options.batching_max_messages
        deadline = time.monotonic() + options.producer_busy_timeout_ms / 1000
        pause = 0.05
        while True:
            try:
                return self.client.create_producer(
                    topic,
                    producer_name=self.producer_name,
                    send_timeout_millis=options.send_timeout_ms,
                    # Room for a whole batch: a full queue must never stall a filling batch.
                    max_pending_messages=max(options.max_pending_messages, 2 * batch_messages),
                    block_if_queue_full=True,
                    batching_enabled=options.batching_enabled,
                    batching_max_messages=batch_messages,
                    # The sink cuts batches itself (``batches``); the client's size trigger
                    # must never cut first.
                    batching_max_allowed_size_in_bytes=(
                        4 * options.batching_max_bytes + (1 << 16)
                        if options.exactly_once
                        else options.batching_max_bytes
                    ),
                    batching_max_publish_delay_ms=(_NO_TIMER_MS if options.exactly_once else 10),
                )
            except ProducerBusy:
                if time.monotonic() > deadline:
                    raise
                logger.info("producer %s is busy (zombie attempt?); retrying", self.producer_name)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

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

    def target_of(self, topic: str, row: SinkRow, row_index: int) -> str:
        """The topic (``topic`` or one of its partitions) the row is written to."""
        found = self._partitions.get(topic)
        if found is None:
            names, partitioned = partition_topics(self.client, topic)
            found = self._partitions[topic] = (names, len(names) if partitioned else 0)
        names, partitions = found
        options = self.options
        block = options.batching_max_messages if options.batching_enabled else 1
        index = route(row.partition, row.key, row_index, partitions, block, self.task.partition)
        return names[index]

    def rows(
        self, batches: Iterator[pa.RecordBatch], sorter: RowSorter | None
    ) -> Iterator[SinkRow]:
        """The task's rows: in input order, or (exactly-once) in ``row_order``'s order."""
        plan, order = self.plan, self.order
        if sorter is None:
            return (row for batch in batches for row in sink_rows(batch, plan, order))
        for batch in batches:
            for row in sink_rows(batch, plan, order):
                sorter.add(row, row_bytes(row.value, row.key, row.properties))
        return sorter.sorted_rows()

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = self.task
        exactly_once = self.options.exactly_once
        sorter = RowSorter(self.options.sort_buffer_bytes) if exactly_once else None
        rows = 0
        try:
            ordered = self.rows(batches, sorter)
            # After the sort: a fault counts rows as they are sent.
            hook = row_fault(self.options.fault_dir, task.batch_id, task.partition)
            for row in ordered:
                target = self.target_of(self.topic_of(row.topic), row, rows)
                if exactly_once:
                    self._add(target, row, rows)
                else:
                    self._send(target, row, None)
                rows += 1
                if hook is not None:
                    hook(rows, self.flush)
            if self.guard is not None:
                self.guard.finish(rows)
            for topic in list(self.pending):
                self._send_batch(topic)
            self.flush()
        finally:
            # After a failure only whole batches were handed to the client, so closing (which
            # sends what the client holds) cannot store a batch a replay would cut elsewhere.
            self.close()
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

    def _open(self, topic: str, index: int, row: SinkRow) -> None:
        """The producer for ``topic``, opened for row ``index`` (the first routed there), and
        the checks against what the broker already holds for it."""
        producer = self.producer(topic)
        last = producer.last_sequence_id()
        if last < 0:
            self._check_not_forgotten(producer.producer_name())
        assert self.guard is not None
        self.guard.producer_ready(topic, last, index, row)

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

    def _add(self, topic: str, row: SinkRow, index: int) -> None:
        """Queue a row in its topic's batch; hand the batch over when it is complete."""
        cutter = self.cutters.get(topic)
        if cutter is None:
            self._open(topic, index, row)
            options = self.options
            cutter = self.cutters[topic] = BatchCutter(
                options.batching_max_messages if options.batching_enabled else 1,
                options.batching_max_bytes,
            )
        elif self.guard is not None:
            self.guard.check(index, topic, row)
        size = row_bytes(row.value, row.key, row.properties)
        if cutter.closes_before(size):
            self._send_batch(topic)
        self.pending.setdefault(topic, []).append((row, sequence_id(self.task.batch_id, index)))
        if cutter.add(size):
            self._send_batch(topic)

    def _send_batch(self, topic: str) -> None:
        rows = self.pending.pop(topic, [])
        cutter = self.cutters[topic]
        for row, seq in rows:
            self._send(topic, row, seq)
        if rows and cutter.count < cutter.max_messages:
            self.producers[topic].flush()  # closed by bytes or by the task's end
        cutter.reset()

    def _send(self, topic: str, row: SinkRow, seq: int | None) -> None:
        self.producer(topic).send_async(
            row.value,
            self.receipts,
            properties=row.properties,
            partition_key=row.key,
            event_timestamp=row.event_time,
            sequence_id=seq,
        )

    def flush(self) -> None:
        for producer in self.producers.values():
            producer.flush()

    def close(self) -> None:
        producers, self.producers = self.producers, {}
        for producer in producers.values():
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
