"""The sink: exactly-once writes through the broker's PIP-6 dedup (reference §2.1).

Each Spark task writes through producers named ``<prefix>-<queryId>-<sparkPartitionId>`` (one per
target topic; names are per topic), and numbers row ``i`` of micro-batch ``b`` with sequence id
``(b << 32) | i``. The query id is stable across restarts from one checkpoint and batch ids only
grow, so each producer's sequence ids grow across batches and runs. A task retry, a replay after a
restart or a second ``commit`` regenerates the same ``(producer, sequence id) -> row`` pairs, and
the broker drops every id at or below the producer's highest stored one: the output holds each row
once. A duplicate receipt (id ``-1:-1``) counts as success.

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

Batch (non-streaming) writes have no query or batch id: batch id 0 and the ``writeId`` option
(random per write when unset) stand in. Task retries are deduplicated; re-running a write with
the same ``writeId`` writes nothing new (every row is a duplicate).

**Partitioned output topics**: each task writes to partition ``i`` through a producer on its
``-partition-i`` topic, with the same producer name on every partition (as Pulsar's partitioned
producer) and the row's sequence id, so dedup holds per partition (a partition sees an
increasing subsequence of the task's ids). The partition of a row is a pure function of the row
(``route``): the ``partition`` column when set, else Pulsar's ``Murmur3_32Hash`` of the key, else
round-robin by blocks of ``batchingMaxMessages`` rows (one per row without batching) starting at
the Spark partition id, so a replay routes every row where its first attempt did.

Requirements (documented in the README): the rows of a Spark partition and their order must be
the same on replay (narrow pipelines from a replayable source such as this connector's); the
output topic must keep its partitioning while a batch is uncommitted; the broker must keep the
producers' dedup state (Magnetar keeps named producers' state; Pulsar purges after 6 h idle).

``exactlyOnce=false``: plain at-least-once producers (broker-chosen names, automatic ids).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

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
    batch_id: int
    writer_id: str
    partition: int
    attempt: int

    @classmethod
    def current(cls, write_id: str) -> TaskIdentity:
        context = TaskContext.get()
        if context is None:  # pragma: no cover - write() always runs in a task
            return cls(0, write_id, 0, 0)
        batch = context.getLocalProperty("streaming.sql.batchId")
        query = context.getLocalProperty("sql.streaming.queryId")
        return cls(
            int(batch) if batch is not None else 0,
            query or write_id,
            context.partitionId(),
            context.attemptNumber(),
        )


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

    def __init__(self, options: SinkOptions, plan: dict[str, int], task: TaskIdentity) -> None:
        self.options = options
        self.plan = plan
        self.task = task
        self.client: Client = shared_client(options.service_url, options.client_options)
        self.producers: dict[str, Producer] = {}
        self.receipts = _Receipts()
        self.cutters: dict[str, BatchCutter] = {}
        self.pending: dict[str, list[tuple[_Message, int]]] = {}
        self._topics: dict[str, str] = {}
        self._partitions: dict[str, tuple[list[str], int]] = {}

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

    def target_of(self, topic: str, message: _Message, row_index: int) -> str:
        """The topic (``topic`` or one of its partitions) the row is written to."""
        found = self._partitions.get(topic)
        if found is None:
            names, partitioned = partition_topics(self.client, topic)
            found = self._partitions[topic] = (names, len(names) if partitioned else 0)
        names, partitions = found
        options = self.options
        block = options.batching_max_messages if options.batching_enabled else 1
        index = route(
            message.partition, message.key, row_index, partitions, block, self.task.partition
        )
        return names[index]

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = self.task
        hook = row_fault(self.options.fault_dir, task.batch_id, task.partition)
        rows = 0
        try:
            for batch in batches:
                for message in _messages(batch, self.plan):
                    target = self.target_of(self.topic_of(message.topic), message, rows)
                    if self.options.exactly_once:
                        self._add(target, message, sequence_id(task.batch_id, rows))
                    else:
                        self._send(target, message, None)
                    rows += 1
                    if hook is not None:
                        hook(rows, self.flush)
            for topic in list(self.pending):
                self._send_batch(topic)
            self.flush()
        finally:
            # After a failure only whole batches were handed to the client, so closing (which
            # sends what the client holds) cannot store a batch a replay would cut elsewhere.
            self.close()
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

    def _add(self, topic: str, message: _Message, seq: int) -> None:
        """Queue a row in its topic's batch; hand the batch over when it is complete."""
        cutter = self.cutters.get(topic)
        if cutter is None:
            options = self.options
            cutter = self.cutters[topic] = BatchCutter(
                options.batching_max_messages if options.batching_enabled else 1,
                options.batching_max_bytes,
            )
        size = row_bytes(message.value, message.key, message.properties)
        if cutter.closes_before(size):
            self._send_batch(topic)
        self.pending.setdefault(topic, []).append((message, seq))
        if cutter.add(size):
            self._send_batch(topic)

    def _send_batch(self, topic: str) -> None:
        rows = self.pending.pop(topic, [])
        cutter = self.cutters[topic]
        for message, seq in rows:
            self._send(topic, message, seq)
        if rows and cutter.count < cutter.max_messages:
            self.producers[topic].flush()  # closed by bytes or by the task's end
        cutter.reset()

    def _send(self, topic: str, message: _Message, seq: int | None) -> None:
        self.producer(topic).send_async(
            message.value,
            self.receipts,
            properties=message.properties,
            partition_key=message.key,
            event_timestamp=message.event_time,
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


@dataclass(frozen=True, slots=True)
class _Message:
    value: bytes | None
    key: str | None
    topic: str | None
    partition: int | None
    event_time: int | None
    properties: dict[str, str] | None


def _messages(batch: pa.RecordBatch, plan: dict[str, int]) -> Iterator[_Message]:
    """The batch's rows as messages, column-wise (no Spark ``Row`` objects)."""
    count = batch.num_rows
    nothing: list[Any] = [None] * count

    def column(role: str, convert: Callable[[pa.Array], list[Any]] | None = None) -> list[Any]:
        index = plan.get(role)
        if index is None:
            return nothing
        array = batch.column(index)
        return convert(array) if convert is not None else array.to_pylist()

    values = column("value", _bytes)
    keys = column("key", _key_text)
    topics = column("topic")
    partitions = column("partition")
    events = column("eventTime", _millis)
    properties = column("properties")
    for i in range(count):
        props = properties[i]
        yield _Message(
            values[i],
            keys[i],
            topics[i],
            partitions[i],
            events[i],
            dict(props) if props else None,
        )


def _bytes(array: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return [None if v is None else v.encode() for v in array.to_pylist()]
    values: list[bytes | None] = array.to_pylist()
    return values


def _key_text(array: pa.Array) -> list[str | None]:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        texts: list[str | None] = array.to_pylist()
        return texts
    out: list[str | None] = []
    for raw in array.to_pylist():
        try:
            out.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise OptionError("dedup-topic sink: a binary key is not UTF-8 text") from None
    return out


def _millis(array: pa.Array) -> list[int | None]:
    unit = {"s": 1000, "ms": 1, "us": 1 / 1000, "ns": 1 / 1_000_000}[array.type.unit]
    raw = array.cast(pa.int64()).to_pylist()
    return [None if v is None else int(v * unit) for v in raw]


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

    def __init__(self, options: SinkOptions, plan: dict[str, int]) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = TaskIdentity.current(write_id="stream")
        return _TaskWriter(self.options, self.plan, task).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Idempotent (Spark may call it twice for one batch); the data is already stored.
        commit_fault(self.options.fault_dir, batchId)
        _log_commit("committed", messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Published messages cannot be retracted; a replay adds no duplicates.
        _log_commit("aborted", messages, batchId)


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: batch id 0 and ``writeId`` (random per write unless given)."""

    def __init__(self, options: SinkOptions, plan: dict[str, int]) -> None:
        self.options = options
        self.plan = plan
        self.write_id = options.write_id or uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task = TaskIdentity.current(write_id=self.write_id)
        return _TaskWriter(self.options, self.plan, task).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_fault(self.options.fault_dir, 0)
        _log_commit("committed", messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("aborted", messages, 0)
