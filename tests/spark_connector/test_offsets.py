"""Source offsets: canonical JSON, ranges, offset specs (pure, no JVM)."""

from __future__ import annotations

import json

import pytest

from spark_connector.offsets import (
    ALL_PARTITIONS,
    AtTime,
    SourceOffset,
    canonical,
    parse_offset_specs,
    parse_time_specs,
)
from spark_connector.option_table import OptionError
from spark_connector.positions import EARLIEST, Position, pack

A = "persistent://public/default/a"
B = "persistent://public/default/b"


def test_offset_json_is_sorted_at_every_level() -> None:
    offset = SourceOffset("r1", {B: {0: Position(1, 2, 0)}, A: {0: Position(1, 1, 3)}})
    text = json.dumps(offset.to_json())
    assert text == json.dumps(canonical(json.loads(text)), sort_keys=True)
    assert text.index(A) < text.index(B)
    assert SourceOffset.from_json(json.loads(text)) == offset


def test_equal_offsets_serialize_identically_whatever_the_build_order() -> None:
    one = SourceOffset("r", {A: {0: Position(1, 1, 0)}, B: {0: Position(2, 2, 2)}})
    two = SourceOffset("r", {B: {0: Position(2, 2, 2)}, A: {0: Position(1, 1, 0)}})
    assert json.dumps(one.to_json()) == json.dumps(two.to_json())


def test_ranges_skip_empty_partitions_and_start_new_ones_at_earliest() -> None:
    start = SourceOffset("r", {A: {0: Position(1, 5, 0)}})
    end = SourceOffset("r", {A: {0: Position(1, 5, 0)}, B: {0: Position(3, 1, 2)}})
    assert start.ranges(end) == [(B, 0, EARLIEST, Position(3, 1, 2))]
    assert end.ranges(end) == []


@pytest.mark.parametrize("bad", [{"v": 2, "rid": "r", "topics": {}}, {"v": 1, "topics": {}}, []])
def test_foreign_offsets_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="not a dedup-topic offset"):
        SourceOffset.from_json(bad)  # type: ignore[arg-type]


def test_offset_specs() -> None:
    # A word applies to every partition of each topic.
    every = ALL_PARTITIONS
    assert parse_offset_specs(" Earliest ", [A, B]) == {
        A: {every: "earliest"},
        B: {every: "earliest"},
    }
    assert parse_offset_specs("latest", [A]) == {A: {every: "latest"}}
    text = json.dumps({A: {"0": -2}, B: {"0": pack(4, 2, 1)}, "c": {"0": -1}})
    assert parse_offset_specs(text, []) == {
        A: {0: "earliest"},
        B: {0: Position(4, 2, 1)},
        "persistent://public/default/c": {0: "latest"},
    }
    with pytest.raises(ValueError, match="earliest"):
        parse_offset_specs("yesterday", [A])


def test_pulsar_spark_serialized_message_ids() -> None:
    """pulsar-spark's ``{"topic": [bytes of MessageId]}``: the partition field names the
    partition; the id's own message is read first."""
    specs = parse_offset_specs(
        json.dumps(
            {
                "a": [8, 11, 16, 101, 24, 2, 32, 1],
                "b": [
                    8,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    1,
                    16,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    1,
                ],
                "c": [
                    8,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    127,
                    16,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    -1,
                    127,
                ],
            }
        ),
        [],
    )
    assert specs == {
        "persistent://public/default/a": {2: Position(11, 101, 1)},
        "persistent://public/default/b": {0: "earliest"},
        "persistent://public/default/c": {0: "latest"},
    }
    with pytest.raises(ValueError, match="not a serialized message id"):
        parse_offset_specs('{"a": [300]}', [])


def test_time_specs() -> None:
    assert parse_time_specs("startingtimestamp", "1000", ["t"], per_partition=False) == {
        "t": {ALL_PARTITIONS: AtTime(1000)}
    }
    assert parse_time_specs(
        "startingoffsetsbytimestamp", '{"t": {"0": 5, "1": "6"}}', [], per_partition=True
    ) == {"persistent://public/default/t": {0: AtTime(5), 1: AtTime(6)}}
    with pytest.raises(OptionError, match="not a time in ms"):
        parse_time_specs("endingtimestamp", "-3", ["t"], per_partition=False)
