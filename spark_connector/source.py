"""The source: batch ``DataSourceReader`` and streaming ``DataSourceStreamReader``.

Process model (pyspark 4.3, reference §1.3): the stream reader that plans (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) lives in one long-lived driver-side process per query
run; ``read`` runs on executors in an unpickled *copy* that saw none of that state. So every
``InputPartition`` carries all ``read`` needs, and ``partitions(start, end)`` is a pure function of
its arguments (Spark calls it first on restart, and the sink's producer names depend on it).

Exactly-once reads = Spark's offset log + a deterministic ``read(start, end)`` + retention of
``[committed, head)`` by the durable cursor (``cursor``). Offsets are "next position to read"
everywhere (``offsets``); ``ReadAllAvailable`` (``Trigger.Once``-like engines pass it) overrides
``maxOffsetsPerTrigger``; ``Trigger.AvailableNow`` snapshots the latest positions first and never
plans beyond them. ``stop()`` is not relied upon (Spark kills the planning process).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from client.message import Message
from client.sync import Client
from spark_connector.clients import shared_client
from spark_connector.entry_columns import EntryColumns
from spark_connector.headers import HEADERS_SCHEMA, with_headers
from spark_connector.offsets import EARLIEST_SPEC, LATEST_SPEC, SourceOffset, canonical
from spark_connector.options import SourceOptions
from spark_connector.planner import Planner
from spark_connector.positions import EARLIEST, Position, pack
from spark_connector.scan import DataLoss, iter_range, iter_range_entries, partition_topic
from spark_connector.schema_read import RAW_VALUE, SchemaDecoder, ValueLayout
from spark_connector.splits import split_ranges

__all__ = ["SOURCE_SCHEMA", "BatchReader", "StreamReader", "TopicRange", "source_schema"]

logger = logging.getLogger(__name__)

SOURCE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, messageId string, "
    "publishTime timestamp, eventTime timestamp, producerName string, sequenceId bigint, "
    "properties map<string,string>"
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def source_schema(include_headers: bool, value: str = RAW_VALUE) -> str:
    """The source's columns; ``includeHeaders`` adds Kafka's ``headers`` (``headers``).

    ``value``: the payload's columns (``schema_read.value_ddl``): a typed ``value`` takes the
    binary one's place; a record's fields come first, as pulsar-spark puts them, and replace it.
    """
    columns = SOURCE_SCHEMA
    if value.startswith("value "):
        columns = columns.replace(RAW_VALUE, value, 1)
    elif value != RAW_VALUE:
        columns = f"{value}, {columns.replace(RAW_VALUE + ', ', '', 1)}"
    return f"{columns}, {HEADERS_SCHEMA}" if include_headers else columns


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """``[start, end)`` of one partition: everything an executor's ``read`` needs."""

    topic: str
    partition: int
    start: Position
    end: Position


def _ranges(
    start: SourceOffset, end: SourceOffset, min_partitions: int | None
) -> list[InputPartition]:
    """One ``TopicRange`` per non-empty partition range, split for ``minPartitions``: a pure
    function of its arguments (see the module docstring)."""
    return [
        TopicRange(topic, partition, first, stop)
        for topic, partition, first, stop in split_ranges(start.ranges(end), min_partitions)
    ]


def _timestamp(millis: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=millis)


_MILLIS = pa.timestamp("ms", tz="UTC")
_MICROS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("messageId", pa.string()),
        ("publishTime", _MICROS),
        ("eventTime", _MICROS),
        ("producerName", pa.string()),
        ("sequenceId", pa.int64()),
        ("properties", pa.map_(pa.string(), pa.string())),
    ]
)


def to_record_batch(
    messages: list[Message], topic: str, partition: int, decoder: SchemaDecoder | None = None
) -> pa.RecordBatch:
    """Messages as one Arrow batch of ``ARROW_SCHEMA`` (no per-row Python objects for Spark).

    ``topic`` and ``partition`` are the columns' values: the topic as the query names it (a
    partitioned topic's name, not its ``-partition-N`` topic) and the partition index.
    ``decoder``: the payload as the topic schema's columns instead of ``value`` (``schema_read``).
    """
    keys: list[bytes | None] = []
    values: list[bytes] = []
    offsets: list[int] = []
    ids: list[str] = []
    published: list[int] = []
    events: list[int | None] = []
    producers: list[str] = []
    sequences: list[int] = []
    properties: list[list[tuple[str, str]] | None] = []
    for message in messages:
        mid = message.message_id()
        key = message.partition_key()
        event = message.event_timestamp()
        ledger, entry, index = mid.ledger_id(), mid.entry_id(), mid.batch_index()
        keys.append(key.encode() if key else None)
        values.append(message.data())
        offsets.append(pack(ledger, entry, index))
        ids.append(f"{ledger}:{entry}:{index}")
        published.append(message.publish_timestamp())
        events.append(event or None)
        producers.append(message.producer_name())
        sequences.append(message.sequence_id())
        props = message.properties()
        properties.append(list(props.items()) if props else None)
    count = len(messages)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(ids, pa.string()),
        pa.array(published, _MILLIS).cast(_MICROS),
        pa.array(events, _MILLIS).cast(_MICROS),
        pa.array(producers, pa.string()),
        pa.array(sequences, pa.int64()),
        pa.array(properties, pa.map_(pa.string(), pa.string())),
    ]
    if decoder is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    return _decoded(messages, columns, decoder)


def _decoded(
    messages: list[Message], columns: list[pa.Array], decoder: SchemaDecoder
) -> pa.RecordBatch:
    """The batch with the payload columns of ``decoder`` (``source_schema``'s order)."""
    names = ARROW_SCHEMA.names
    payload = decoder.columns(messages)
    if payload[0][0] == "value":  # a primitive schema: a typed value in the binary one's place
        columns[1] = payload[0][1]
        return pa.RecordBatch.from_arrays(columns, names=names)
    rest = [(n, c) for n, c in zip(names, columns, strict=True) if n != "value"]
    both = [*payload, *rest]
    return pa.RecordBatch.from_arrays([c for _, c in both], names=[n for n, _ in both])


_ARROW_ROWS = 4096


def read_range(
    options: SourceOptions, part: TopicRange, layout: ValueLayout | None = None
) -> Iterator[pa.RecordBatch]:
    """The partition's rows as Arrow batches of up to 4096 rows (decoded as ``layout`` says)."""
    client = shared_client(options.service_url, options.client_options)
    try:
        source = partition_topic(client, part.topic, part.partition)
    except DataLoss:
        if options.fail_on_data_loss:
            raise
        logger.warning("%s partition %d is gone: nothing to read", part.topic, part.partition)
        return
    finish = with_headers if options.include_headers else _same
    if layout is None or layout.kind == "raw":
        yield from _read_entries(options, part, client, source, finish)
        return
    decoder = SchemaDecoder(client, source, layout)
    chunk: list[Message] = []
    for message in iter_range(
        client,
        source,
        part.start,
        part.end,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        reader_options=options.reader_options,
    ):
        chunk.append(message)
        if len(chunk) == _ARROW_ROWS:
            yield finish(to_record_batch(chunk, part.topic, part.partition, decoder))
            chunk = []
    if chunk:
        yield finish(to_record_batch(chunk, part.topic, part.partition, decoder))


def _read_entries(
    options: SourceOptions,
    part: TopicRange,
    client: Client,
    source: str,
    finish: Callable[[pa.RecordBatch], pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The raw-value path: whole entries into columns (``entry_columns``), no ``Message`` per
    row; batches of about ``_ARROW_ROWS`` rows (whole entries: a batch entry is not cut)."""
    columns = EntryColumns(part.topic, part.partition, ARROW_SCHEMA)
    for entry, taken in iter_range_entries(
        client,
        source,
        part.start,
        part.end,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        reader_options=options.reader_options,
    ):
        columns.add(entry, taken)
        if columns.count >= _ARROW_ROWS:
            yield finish(columns.take())
    if columns.count:
        yield finish(columns.take())


def _same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


class BatchReader(DataSourceReader):
    """``spark.read``: ``startingOffsets`` (default earliest) to ``endingOffsets`` (latest)."""

    def __init__(self, options: SourceOptions, layout: ValueLayout | None = None) -> None:
        self.options = options
        self.layout = layout

    def partitions(self) -> list[InputPartition]:
        planner = Planner(self.options)
        topics = planner.topics()
        starting = planner.specs(self.options.starting, EARLIEST_SPEC, topics)
        ending = planner.specs(self.options.ending, LATEST_SPEC, topics)
        start = SourceOffset("batch", planner.resolve_all(starting, topics, EARLIEST_SPEC))
        end = SourceOffset(
            "batch", planner.resolve_all(ending, topics, LATEST_SPEC, starting=False)
        )
        return _ranges(start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return read_range(self.options, partition, self.layout)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``; see the module docstring."""

    def __init__(self, options: SourceOptions, layout: ValueLayout | None = None) -> None:
        self.options = options
        self.layout = layout
        self._planner: Planner | None = None
        self._initial: dict[str, Any] | None = None
        self._snapshot: dict[tuple[str, int], Position] | None = None
        self._cursor_at: SourceOffset | None = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def subscription(self, rid: str) -> str:
        return self.options.subscription_name or f"spark-{rid}"

    # --- limits -------------------------------------------------------------------------

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        planner = self.planner
        self._snapshot = {
            (topic, partition): planner.latest(topic, partition)
            for topic in planner.topics()
            for partition in planner.partitions_of(topic)
        }

    # --- offsets ------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        # Called twice on a fresh query: resolve once ("latest" must not move in between).
        if self._initial is None:
            planner = self.planner
            topics = planner.topics()
            specs = planner.specs(self.options.starting, LATEST_SPEC, topics)
            offset = SourceOffset(
                uuid.uuid4().hex[:16], planner.resolve_all(specs, topics, LATEST_SPEC)
            )
            for topic, parts in offset.topics.items():
                for partition in parts:
                    planner.cursor(topic, partition, self.subscription(offset.rid)).ensure()
            self._move_cursor(offset)
            self._initial = offset.to_json()
        return self._initial

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_json(start)
        # Spark plans a batch only after the previous one committed, so ``start`` is done:
        # its own commit() call may come late (a restart with nothing new never makes it).
        self._move_cursor(begin)
        planner = self.planner
        topics = sorted(set(planner.topics()) | set(begin.topics))
        ranges: dict[tuple[str, int], tuple[Position, Position]] = {}
        for topic in topics:
            known = set(begin.topics.get(topic, {}))
            for partition in sorted(known | set(planner.partitions_of(topic))):
                first = begin.position(topic, partition) or EARLIEST
                end = planner.latest(topic, partition, first)
                cap = self._snapshot.get((topic, partition)) if self._snapshot else None
                if cap is not None:
                    end = min(end, cap)
                if end < first:
                    planner.check_not_behind(topic, partition, first)
                ranges[(topic, partition)] = (first, end)
        if isinstance(limit, ReadMaxRows):
            chosen = planner.fair_ends(ranges, limit.max_rows)
        else:
            chosen = {key: end for key, (_, end) in ranges.items()}
        ends: dict[str, dict[int, Position]] = {topic: {} for topic in topics}
        for (topic, partition), end in chosen.items():
            ends[topic][partition] = end
        result: dict[str, Any] = canonical(SourceOffset(begin.rid, ends).to_json())
        return result

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return _ranges(
            SourceOffset.from_json(start),
            SourceOffset.from_json(end),
            self.options.min_partitions,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return read_range(self.options, partition, self.layout)

    def commit(self, end: dict[str, Any]) -> None:
        self._move_cursor(SourceOffset.from_json(end))

    def _move_cursor(self, done: SourceOffset) -> None:
        """Move the durable cursor to ``done`` (once per distinct offset)."""
        if done != self._cursor_at:
            self.planner.commit(done, self.subscription(done.rid))
            self._cursor_at = done

    def stop(self) -> None:
        pass  # never observed to run; nothing relies on it
