"""Who a sink task writes as, and where each of its rows goes: pure functions of the task.

``sequence_id``: row ``i`` of micro-batch ``b`` is ``(b << 32) | i``. ``check_not_reset``: the
broker must not hold output of a later batch for the producer. ``route``: a row's partition
(its ``partition`` column, else Murmur3 of its key, else round-robin by blocks), the same on every
replay. ``TaskIdentity``: the batch id and writer id from Spark's task-local properties.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import TaskContext

from protocol.hashing import murmur3_32_hash
from spark_connector.options import OptionError

__all__ = ["ROW_BITS", "CheckpointReset", "TaskIdentity", "check_not_reset", "route", "sequence_id"]

ROW_BITS = 32
_ROW_BITS = ROW_BITS


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
