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
``{"topic": {"0": spec}}`` (short topic names completed, as everywhere) where ``spec`` is -2
(earliest), -1 (latest), a packed ``offset`` column value, or a position object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from spark_connector.options import canonical_topic
from spark_connector.positions import EARLIEST, Position

__all__ = [
    "ALL_PARTITIONS",
    "EARLIEST_SPEC",
    "LATEST_SPEC",
    "OffsetSpec",
    "SourceOffset",
    "canonical",
    "parse_offset_specs",
]

EARLIEST_SPEC = "earliest"
LATEST_SPEC = "latest"
OffsetSpec = Position | str  # a position, or "earliest"/"latest" to resolve against the broker
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
        if not isinstance(parts, dict):
            raise ValueError(f"offsets of {topic!r} must be an object of partitions: {parts!r}")
        specs[canonical_topic(topic)] = {int(part): _spec(raw) for part, raw in parts.items()}
    return specs


def _spec(raw: Any) -> OffsetSpec:
    if raw == -2 and not isinstance(raw, bool):
        return EARLIEST_SPEC
    if raw == -1 and not isinstance(raw, bool):
        return LATEST_SPEC
    return Position.from_json(raw)
