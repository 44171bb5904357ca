"""Offset planning: where each partition's next micro-batch ends (driver side, long-lived).

Runs in the stream reader's long-lived planning process (one per query run), or in the batch
reader's planner process. It keeps one ``Probe`` (a reader with a queue of one message) per
partition open across micro-batches and never reads a backlog itself:

* **latest** (``ReadAllAvailable``, the end of a batch read): after the partition's last message
  (GET_LAST_MESSAGE_ID), i.e. ``(l, e, last index + 1)``;
* **a budget** (``ReadMaxRows`` from ``maxOffsetsPerTrigger``, in entries, ``budget``): split
  over the partitions in proportion to their backlogs, each end computed from message ids (and
  ledger sizes from ``admin.url`` when a range spans ledgers; else one probe read);
* a **cap** (``Trigger.AvailableNow``'s snapshot): never beyond it;
* a **publish time** (``startingTimestamp``...): the broker's seek by time, one message read.

A topic maps to the list of its partitions: ``[0]`` for a non-partitioned topic (read as
itself), ``[0, .., N-1]`` for a partitioned one (partition ``i`` read from ``-partition-i``),
asked of the broker at every trigger, so partitions added by ``update-partitioned-topic`` join
the query at the earliest position (offsets absent from ``start`` begin there). ``assign``
restricts a topic to the partitions it lists.

The batch size of every entry the planner saw at an end position is remembered, so the cursor
can make a batch-index acknowledgement when a committed end falls inside a batch.
"""

from __future__ import annotations

import logging
import re

from client.sync import Client
from protocol.topic_name import TopicName
from spark_connector.admin import ledgers_of
from spark_connector.auth import AuthSpec
from spark_connector.budget import Ledgers, cut, estimate, fair_shares
from spark_connector.clients import partition_topics, shared_client
from spark_connector.cursor import DurableCursor
from spark_connector.offsets import (
    ALL_PARTITIONS,
    EARLIEST_SPEC,
    LATEST_SPEC,
    AtTime,
    OffsetSpec,
    SourceOffset,
    parse_offset_specs,
    parse_time_specs,
)
from spark_connector.options import OptionError, SourceOptions
from spark_connector.positions import EARLIEST, Position
from spark_connector.probe import Probe
from spark_connector.scan import DataLoss, data_loss_message

__all__ = ["Planner"]

logger = logging.getLogger(__name__)

Key = tuple[str, int]


class Planner:
    """Resolves offset specs and micro-batch ends against the broker."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: Client | None = None
        self._probes: dict[Key, Probe] = {}
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
        """The topic's partition indexes now (``[0]`` when it is not partitioned), only those
        ``assign`` lists when it is given.

        Raises:
            OptionError: ``assign`` names a partition the topic does not have.
        """
        names, _ = partition_topics(self.client, topic)
        self._names[topic] = names
        assigned = self.options.assign.get(topic)
        if assigned is None:
            return list(range(len(names)))
        missing = [p for p in assigned if p >= len(names)]
        if missing:
            raise OptionError(
                f"option 'assign': {topic} has {len(names)} partition(s), not {missing}"
            )
        return list(assigned)

    def partition_topic(self, topic: str, partition: int) -> str:
        """The topic holding ``partition`` (as of the last ``partitions_of``)."""
        names = self._names.get(topic)
        if names is None or partition >= len(names):
            names, _ = partition_topics(self.client, topic)
            self._names[topic] = names
        if partition >= len(names):
            raise DataLoss(
                data_loss_message(topic, f"partition {partition} is gone ({len(names)} left)")
            )
        return names[partition]

    # --- positions ----------------------------------------------------------------------

    def probe(self, topic: str, partition: int) -> Probe:
        key = (topic, partition)
        found = self._probes.get(key)
        if found is None:
            found = Probe(
                self.client, self.partition_topic(topic, partition), self.options.poll_timeout_ms
            )
            self._probes[key] = found
        return found

    def latest(self, topic: str, partition: int, start: Position = EARLIEST) -> Position:
        """After the partition's last message (``start`` when there is none)."""
        last = self.probe(topic, partition).last_message_id()
        if last.entry_id() < 0:
            # Empty, or everything trimmed (e.g. expired after the query read it): nothing new.
            # A deleted and re-created topic shows up once it has data again (a position below
            # ``start``, or ``start``'s entry missing when read).
            return start
        end = Position.after_message(last.ledger_id(), last.entry_id(), last.batch_index())
        self.batch_sizes[(topic, partition, end)] = end.batch
        return end

    def _ledgers(self, topic: str, partition: int) -> Ledgers | None:
        admin = self.options.admin_url
        if admin is None:
            return None
        auth = self.options.client_options.get("authentication")
        return ledgers_of(
            admin,
            self.partition_topic(topic, partition),
            auth if isinstance(auth, AuthSpec) else None,
        )

    def fair_ends(
        self, ranges: dict[Key, tuple[Position, Position]], limit: int
    ) -> dict[Key, Position]:
        """Micro-batch ends for ``{key: (start, latest end)}`` within ``limit`` entries in all,
        split in proportion to each partition's backlog (``budget``)."""
        firsts: dict[Key, Position] = {}
        ledgers: dict[Key, Ledgers | None] = {}
        for key, (start, end) in ranges.items():
            if end < start:
                # The partition went back (deleted and re-created; the caller reported it):
                # as a range ending before its start is read, from the earliest message.
                start = EARLIEST
            if end <= start:
                continue
            # EARLIEST is no entry: count from the oldest message kept (one probe read).
            first = self.probe(*key).first_from(start) if start.is_earliest else start
            firsts[key] = min(first, end)
            ledgers[key] = self._ledgers(*key) if first.ledger != end.ledger else None
        backlogs = {
            key: estimate(first, ranges[key][1], ledgers[key]) for key, first in firsts.items()
        }
        shares = fair_shares(limit, backlogs)
        out = {key: start for key, (start, _) in ranges.items()}
        for key, first in firsts.items():
            end = ranges[key][1]
            found = cut(first, shares[key], end, ledgers[key])
            if found is None:
                # Past the first ledger's end, whose size is unknown: where that entry is (the
                # first of a later ledger when the ledger is shorter: fewer entries, still a
                # cut at an entry that exists).
                target = Position(first.ledger, first.entry + shares[key], 0)
                found = min(self.probe(*key).first_from(target), end)
            out[key] = found
        return out

    def resolve(self, topic: str, partition: int, spec: OffsetSpec, *, starting: bool) -> Position:
        """A concrete position for ``earliest``/``latest``/a publish time/a position.

        Raises:
            OptionError: a starting time no message reaches, under strategy ``error``.
        """
        if spec == EARLIEST_SPEC:
            return EARLIEST
        if spec == LATEST_SPEC:
            return self.latest(topic, partition)
        if isinstance(spec, AtTime):
            found = self.probe(topic, partition).at_time(spec.millis)
            if found is not None:
                return found
            if starting and self.options.timestamp_strategy == "error":
                raise OptionError(
                    f"dedup-topic: no message of {topic} partition {partition} was published "
                    f"at or after {spec.millis} (set startingOffsetsByTimestampStrategy=latest "
                    "to start after its last message instead)"
                )
            return self.latest(topic, partition)
        assert isinstance(spec, Position)
        return spec

    def specs(
        self, given: tuple[str, str] | None, default: str, topics: list[str]
    ) -> dict[str, dict[int, OffsetSpec]]:
        """The per-partition specs of a start or end option (``given``: name and value)."""
        if given is None:
            return parse_offset_specs(default, topics)
        name, value = given
        if name.endswith("offsets"):
            return parse_offset_specs(value, topics)
        return parse_time_specs(name, value, topics, per_partition=name.endswith("bytimestamp"))

    def resolve_all(
        self,
        specs: dict[str, dict[int, OffsetSpec]],
        topics: list[str],
        default: str,
        *,
        starting: bool = True,
    ) -> dict[str, dict[int, Position]]:
        """Positions for every partition of ``topics``: the spec's, else ``default``'s."""
        out: dict[str, dict[int, Position]] = {}
        for topic in topics:
            given = specs.get(topic, {})
            every = given.get(ALL_PARTITIONS, default)
            out[topic] = {
                partition: self.resolve(
                    topic, partition, given.get(partition, every), starting=starting
                )
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

    def close(self) -> None:
        """Close the probes (the stream reader's process is killed without it; tests call it)."""
        for probe in self._probes.values():
            probe.close()
        self._probes.clear()

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
