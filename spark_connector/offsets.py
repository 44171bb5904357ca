"""Source offsets: the JSON Spark checkpoints, and the ``startingOffsets``/``endingOffsets`` forms.

Pure code (no I/O, no pyspark).

A source offset is::

    {"rid": "<id>", "topics": {"persistent://t/n/x": {"0": {"b": 0, "e": 7, "l": 3}}}, "v": 1}

* per topic and partition the ``Position`` of the **next** message to read (exclusive end);
* ``rid``: a random id made once per checkpoint (in ``initialOffset``) and carried by every later
  offset: the stream reader never sees the query id, but always gets the checkpointed offsets, so
  ``rid`` names the durable subscription ``spark-<rid>`` stably across restarts;
* keys sorted at every level (``canonical``): Spark compares offsets as JSON *strings*, and an
  equal offset with another key order looks like new data (an empty micro-batch per trigger).

``startingOffsets``/``endingOffsets`` take ``earliest``, ``latest`` or JSON
``{"topic": {"0": spec}}`` (short topic names completed, as everywhere; Kafka's form) where
``spec`` is -2 (earliest), -1 (latest), a packed ``offset`` column value (what this connector
calls an offset: the source's ``offset`` column, naming one message), or a position object; or
pulsar-spark's form ``{"topic": [8, 11, 16, 101, ...]}``: a serialized message id per topic (its
partition field names the partition), read from that message on (inclusive).

The ``...ByTimestamp`` options give ``{"topic": {"0": millis}}`` and ``startingTimestamp`` one
time for every partition: an ``AtTime`` spec, the first message published at or after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from client.message_id import MessageId
from spark_connector.option_table import OptionError
from spark_connector.positions import EARLIEST, Position
from spark_connector.topics import canonical_topic

__all__ = [
    "ALL_PARTITIONS",
    "EARLIEST_SPEC",
    "LATEST_SPEC",
    "AtTime",
    "OffsetSpec",
    "SourceOffset",
    "canonical",
    "parse_offset_specs",
    "parse_time_specs",
]

EARLIEST_SPEC = "earliest"
LATEST_SPEC = "latest"


@dataclass(frozen=True)
class AtTime:
    """The first message published at or after ``millis`` (ms since the epoch)."""

    millis: int


# A position, "earliest"/"latest" or a publish time, to resolve against the broker.
OffsetSpec = Position | str | AtTime
VERSION = 1


def canonical(value: Any) -> Any:
    """``value`` with every dict rebuilt in sorted key order (Spark compares offsets as text)."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


@dataclass(frozen=True)
class SourceOffset:
    """Next positions of every partition of every topic a query reads."""

    rid: str
    topics: dict[str, dict[int, Position]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        topics = {
            topic: {str(partition): position.to_json() for partition, position in parts.items()}
            for topic, parts in self.topics.items()
        }
        result: dict[str, Any] = canonical({"rid": self.rid, "topics": topics, "v": VERSION})
        return result

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SourceOffset:
        """Parse what ``to_json`` made (a checkpointed offset).

        Raises:
            ValueError: not an offset of this connector (or of a newer version).
        """
        if not isinstance(value, dict) or value.get("v") != VERSION:
            raise ValueError(f"not a dedup-topic offset (version {VERSION}): {value!r}")
        rid = value.get("rid")
        topics = value.get("topics")
        if not isinstance(rid, str) or not isinstance(topics, dict):
            raise ValueError(f"not a dedup-topic offset: {value!r}")
        return cls(
            rid,
            {
                topic: {int(part): Position.from_json(pos) for part, pos in parts.items()}
                for topic, parts in topics.items()
            },
        )

    def position(self, topic: str, partition: int) -> Position | None:
        return self.topics.get(topic, {}).get(partition)

    def ranges(self, end: SourceOffset) -> list[tuple[str, int, Position, Position]]:
        """``(topic, partition, start, end)`` for every partition whose range is not empty.

        Sorted by topic and partition; a pure function of the two offsets (the sink's Spark
        partition ids, hence its producer names, depend on it). A partition new in ``end`` starts
        at the earliest position.
        """
        out = []
        for topic in sorted(end.topics):
            for partition in sorted(end.topics[topic]):
                stop = end.topics[topic][partition]
                start = self.position(topic, partition) or EARLIEST
                if start != stop:
                    out.append((topic, partition, start, stop))
        return out


ALL_PARTITIONS = -1
"""The partition key of a spec that applies to every partition of its topic."""


def parse_offset_specs(text: str, default_topics: list[str]) -> dict[str, dict[int, OffsetSpec]]:
    """``startingOffsets``/``endingOffsets`` as ``{topic: {partition: spec}}``.

    ``earliest``/``latest`` apply to every partition of ``default_topics`` (key
    ``ALL_PARTITIONS``); a JSON object gives per-partition specs (a partition it leaves out
    gets the caller's default).

    Raises:
        ValueError: neither form, naming the option's expected syntax.
    """
    stripped = text.strip()
    if stripped.lower() in (EARLIEST_SPEC, LATEST_SPEC):
        return {topic: {ALL_PARTITIONS: stripped.lower()} for topic in default_topics}
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'offsets must be "earliest", "latest" or JSON {{"topic": {{"0": offset}}}}: {exc}'
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f'offsets JSON must be an object {{"topic": {{"0": offset}}}}: {text}')
    specs: dict[str, dict[int, OffsetSpec]] = {}
    for topic, parts in value.items():
        if isinstance(parts, list):
            partition, spec = _serialized_id(topic, parts)
            specs.setdefault(canonical_topic(topic), {})[partition] = spec
            continue
        if not isinstance(parts, dict):
            raise ValueError(f"offsets of {topic!r} must be an object of partitions: {parts!r}")
        specs[canonical_topic(topic)] = {
            _partition(part): _spec(raw) for part, raw in parts.items()
        }
    return specs


def _partition(text: str) -> int:
    try:
        partition = int(text)
    except ValueError:
        partition = -1
    if partition < 0:
        raise ValueError(f"partition {text!r} is not a partition index")
    return partition


_LATEST_LEDGER = (1 << 63) - 1


def _serialized_id(topic: str, raw: list[Any]) -> tuple[int, OffsetSpec]:
    """pulsar-spark's ``MessageId.toByteArray`` as JSON (Java's signed bytes):
    ``(partition, spec)``; a non-partitioned topic's id has partition -1, read as 0."""
    if not all(isinstance(b, int) and not isinstance(b, bool) and -128 <= b < 256 for b in raw):
        raise ValueError(f"offset of {topic!r} is not a serialized message id (bytes): {raw!r}")
    try:
        mid = MessageId.deserialize(bytes(b & 0xFF for b in raw))
    except Exception as exc:
        raise ValueError(f"offset of {topic!r} is not a serialized message id: {exc}") from None
    partition = max(mid.partition(), 0)
    if mid.ledger_id() < 0:
        return partition, EARLIEST_SPEC
    if mid.ledger_id() == _LATEST_LEDGER:
        return partition, LATEST_SPEC
    return partition, Position.of_message(mid.ledger_id(), mid.entry_id(), mid.batch_index())


def parse_time_specs(
    name: str, text: str, default_topics: list[str], *, per_partition: bool
) -> dict[str, dict[int, OffsetSpec]]:
    """``startingTimestamp`` (``per_partition`` False: one time, every partition) or a
    ``...OffsetsByTimestamp`` JSON ``{"topic": {"0": millis}}``.

    Raises:
        OptionError: naming ``name``, for a value of neither form.
    """
    if not per_partition:
        at = AtTime(_millis(name, text.strip()))
        return {topic: {ALL_PARTITIONS: at} for topic in default_topics}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name!r} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict) or not all(isinstance(p, dict) for p in value.values()):
        raise OptionError(f'option {name!r} must be {{"topic": {{"0": millis}}}}, not {text!r}')
    try:
        return {
            canonical_topic(topic): {
                _partition(part): AtTime(_millis(name, raw)) for part, raw in parts.items()
            }
            for topic, parts in value.items()
        }
    except ValueError as exc:
        raise OptionError(f"option {name!r}: {exc}") from None


def _millis(name: str, raw: Any) -> int:
    if isinstance(raw, str):
        try:
            raw = int(raw, 10)
        except ValueError:
            pass
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise OptionError(f"option {name!r}: {raw!r} is not a time in ms since the epoch")
    return raw


def _spec(raw: Any) -> OffsetSpec:
    if raw == -2 and not isinstance(raw, bool):
        return EARLIEST_SPEC
    if raw == -1 and not isinstance(raw, bool):
        return LATEST_SPEC
    return Position.from_json(raw)
