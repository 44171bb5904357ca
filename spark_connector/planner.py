"""Offset planning: where each partition's next micro-batch ends (driver side, long-lived).

Runs in the stream reader's long-lived planning process (one per query run), or in the batch
reader's planner process. It keeps one ``PartitionScan`` per partition open across micro-batches:

* **latest** (``ReadAllAvailable``, the end of a batch read): after the partition's last message
  (GET_LAST_MESSAGE_ID), i.e. ``(l, e, last index + 1)``;
* **a message budget** (``ReadMaxRows`` from ``maxOffsetsPerTrigger``): the scan reads from the
  start, counts ``n`` messages and the end is the position of the ``n+1``-th (so a cut can fall
  inside a batched entry), or after the last one read when fewer exist. The scan stays open at
  that message, so the next micro-batch, starting there, continues without re-reading. The
  budget is spent over partitions in (topic, partition) order;
* a **cap** (``Trigger.AvailableNow``'s snapshot): never beyond it.

A topic maps to the list of its partitions: ``[0]`` for a non-partitioned topic (read as
itself), ``[0, .., N-1]`` for a partitioned one (partition ``i`` read from ``-partition-i``),
asked of the broker at every trigger, so partitions added by ``update-partitioned-topic`` join
the query at the earliest position (offsets absent from ``start`` begin there).

The batch size of every entry the planner saw at an end position is remembered, so the cursor
can make a batch-index acknowledgement when a committed end falls inside a batch.
"""

from __future__ import annotations

import logging
import re

from client.sync import Client
from protocol.topic_name import TopicName
from spark_connector.clients import partition_topics, shared_client
from spark_connector.cursor import DurableCursor
from spark_connector.offsets import (
    ALL_PARTITIONS,
    EARLIEST_SPEC,
    LATEST_SPEC,
    OffsetSpec,
    SourceOffset,
)
from spark_connector.options import SourceOptions
from spark_connector.positions import EARLIEST, Position
from spark_connector.scan import DataLoss, PartitionScan, data_loss_message, position_of

__all__ = ["Planner"]

logger = logging.getLogger(__name__)


class Planner:
    """Resolves offset specs and micro-batch ends against the broker."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: Client | None = None
        self._scans: dict[tuple[str, int], PartitionScan] = {}
        self._cursors: dict[str, DurableCursor] = {}
        self._names: dict[str, list[str]] = {}
        self.batch_sizes: dict[tuple[str, int, Position], int] = {}

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = shared_client(self.options.service_url, self.options.client_options)
        return self._client

    # --- topics -------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """The topics to read now (a pattern is matched against its namespace's topics)."""
        pattern = self.options.topics_pattern
        if pattern is None:
            return list(self.options.topics)
        namespace = "public/default"
        found = re.match(r"persistent://([^/]+/[^/]+)/", pattern)
        if found:
            namespace = found.group(1)
        regex = re.compile(pattern)
        out = set()
        for name in self.client.get_topics_of_namespace(namespace):
            # A partitioned topic is listed by its partitions: match (and read) the topic.
            parsed = TopicName.parse(TopicName.parse(name).partitioned_topic_name)
            if regex.fullmatch(parsed.full_name) or regex.fullmatch(parsed.local_name):
                out.add(parsed.full_name)
        return sorted(out)

    def partitions_of(self, topic: str) -> list[int]:
        """The topic's partition indexes now (``[0]`` when it is not partitioned)."""
        names, _ = partition_topics(self.client, topic)
        self._names[topic] = names
        return list(range(len(names)))

    def partition_topic(self, topic: str, partition: int) -> str:
        """The topic holding ``partition`` (as of the last ``partitions_of``)."""
        names = self._names.get(topic)
        if names is None or partition >= len(names):
            self.partitions_of(topic)
            names = self._names[topic]
        if partition >= len(names):
            raise DataLoss(
                data_loss_message(topic, f"partition {partition} is gone ({len(names)} left)")
            )
        return names[partition]

    # --- positions ----------------------------------------------------------------------

    def _scan(self, topic: str, partition: int, start: Position) -> PartitionScan:
        """A scan positioned at ``start`` (the open one when it is already there)."""
        key = (topic, partition)
        scan = self._scans.get(key)
        if scan is not None and scan.next_position != start:
            scan.close()
            scan = None
        if scan is None:
            scan = PartitionScan(
                self.client,
                self.partition_topic(topic, partition),
                start,
                fail_on_data_loss=self.options.fail_on_data_loss,
                poll_timeout_ms=self.options.poll_timeout_ms,
            )
            self._scans[key] = scan
        return scan

    def latest(self, topic: str, partition: int, start: Position = EARLIEST) -> Position:
        """After the partition's last message (``start`` when there is none)."""
        last = self._scan(topic, partition, start).last_message_id()
        if last.entry_id() < 0:
            # Empty, or everything trimmed (e.g. expired after the query read it): nothing new.
            # A deleted and re-created topic shows up once it has data again (a position below
            # ``start``, or ``start``'s entry missing when read).
            return start
        end = Position.after_message(last.ledger_id(), last.entry_id(), last.batch_index())
        self.batch_sizes[(topic, partition, end)] = end.batch
        return end

    def advance(
        self, topic: str, partition: int, start: Position, budget: int, cap: Position | None
    ) -> tuple[Position, int]:
        """Read up to ``budget`` messages from ``start`` (below ``cap``): ``(end, count)``."""
        scan = self._scan(topic, partition, start)
        count = 0
        while True:
            message = scan.peek(wait=False)
            if message is None:
                break
            position = position_of(message)
            if cap is not None and position >= cap:
                break
            if count == budget:
                size = message.message_id().batch_size()
                self.batch_sizes[(topic, partition, position)] = max(size, 1)
                return position, count
            scan.take()
            count += 1
        end = scan.next_position
        return (min(end, cap) if cap is not None else end), count

    def resolve(self, topic: str, partition: int, spec: OffsetSpec) -> Position:
        """A concrete position for ``earliest``/``latest``/a position."""
        if spec == EARLIEST_SPEC:
            return EARLIEST
        if spec == LATEST_SPEC:
            return self.latest(topic, partition)
        assert isinstance(spec, Position)
        return spec

    def resolve_all(
        self, specs: dict[str, dict[int, OffsetSpec]], topics: list[str], default: str
    ) -> dict[str, dict[int, Position]]:
        """Positions for every partition of ``topics``: the spec's, else ``default``'s."""
        out: dict[str, dict[int, Position]] = {}
        for topic in topics:
            given = specs.get(topic, {})
            every = given.get(ALL_PARTITIONS, default)
            out[topic] = {
                partition: self.resolve(topic, partition, given.get(partition, every))
                for partition in self.partitions_of(topic)
            }
        return out

    def check_not_behind(self, topic: str, partition: int, start: Position) -> None:
        """Data-loss check for a partition whose latest position went below ``start``."""
        what = f"the topic's end went back below the committed position {start}"
        if self.options.fail_on_data_loss:
            raise DataLoss(data_loss_message(topic, what))
        logger.warning("%s", data_loss_message(topic, what))

    # --- cursor -------------------------------------------------------------------------

    def cursor(self, topic: str, partition: int, subscription: str) -> DurableCursor:
        """The query's durable cursor on one partition (a subscription per partition topic)."""
        name = self.partition_topic(topic, partition)
        found = self._cursors.get(name)
        if found is None or found.subscription != subscription:
            found = DurableCursor(self.client, name, subscription)
            self._cursors[name] = found
        return found

    def commit(self, offset: SourceOffset, subscription: str) -> None:
        for topic, parts in offset.topics.items():
            for partition, end in parts.items():
                size = self.batch_sizes.get((topic, partition, end))
                self.cursor(topic, partition, subscription).move_to(end, size)
        # Forget sizes of positions at or before what is now committed.
        self.batch_sizes = {
            key: size
            for key, size in self.batch_sizes.items()
            if (known := offset.position(key[0], key[1])) is None or key[2] > known
        }
