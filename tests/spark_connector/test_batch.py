"""Batch ``df.write`` / ``spark.read`` through a real broker: a round trip keeps everything."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)


def test_write_then_read_round_trip(spark: Any, broker: BrokerThread) -> None:
    topic = "persistent://public/default/batch-round-trip"
    rows = [
        (
            f"value-{i}".encode(),
            f"key-{i % 3}" if i % 4 else None,
            {"i": str(i), "kind": "even" if i % 2 == 0 else "odd"} if i % 5 else None,
            T0 + dt.timedelta(milliseconds=i) if i % 6 else None,
        )
        for i in range(40)
    ]
    frame = spark.createDataFrame(
        rows, "value binary, key string, properties map<string,string>, eventTime timestamp"
    ).repartition(2)
    (
        frame.write.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    expected = {
        Sent(
            value,
            key.encode() if key else None,
            tuple(sorted(props.items())) if props else (),
            int(event.timestamp() * 1000) if event else None,
        )
        for value, key, props, event in rows
    }
    stored = consume_all(broker.url, topic)
    assert len(stored) == len(rows)
    assert set(stored) == expected

    read = (
        spark.read.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .load()
        .collect()
    )
    assert len(read) == len(rows)
    back = {
        Sent(
            row.value,
            row.key,
            tuple(sorted(row.properties.items())) if row.properties else (),
            int(row.eventTime.timestamp() * 1000) if row.eventTime else None,
        )
        for row in read
    }
    assert back == expected
    assert {row.topic for row in read} == {topic}
    assert {row.partition for row in read} == {0}
    offsets = sorted(row.offset for row in read)
    assert len(set(offsets)) == len(rows)
    assert all(row.publishTime is not None and row.producerName for row in read)


def test_batched_entries_read_with_offsets(spark: Any, broker: BrokerThread) -> None:
    """Batched entries: offsets are per message, and a packed offset restarts mid-batch."""
    topic = "persistent://public/default/batch-offsets"
    produce(broker.url, topic, [Sent(f"m{i}".encode()) for i in range(10)], batching=True)
    source = (
        spark.read.format("dedup-topic").option("service.url", broker.url).option("topic", topic)
    )
    rows = source.load().orderBy("offset").collect()
    assert [row.value for row in rows] == [f"m{i}".encode() for i in range(10)]
    assert [row.messageId.split(":")[2] for row in rows[:4]] == ["0", "1", "2", "3"]
    # Start at message 5 (inside the second batch entry), end before message 9.
    starting = f'{{"{topic}": {{"0": {rows[5].offset}}}}}'
    ending = f'{{"{topic}": {{"0": {rows[9].offset}}}}}'
    middle = (
        source.option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
        .orderBy("offset")
        .collect()
    )
    assert [row.value for row in middle] == [b"m5", b"m6", b"m7", b"m8"]


def test_unknown_sink_column_fails_at_planning(spark: Any, broker: BrokerThread) -> None:
    frame = spark.createDataFrame([(b"v", 1)], "value binary, colour int")
    with pytest.raises(Exception, match="unknown input column 'colour'"):
        (
            frame.write.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", "unknown-column")
            .mode("append")
            .save()
        )


def test_partition_column_on_unpartitioned_topic_fails(spark: Any, broker: BrokerThread) -> None:
    frame = spark.createDataFrame([(b"v", 3)], "value binary, partition int")
    with pytest.raises(Exception, match="is not partitioned"):
        (
            frame.write.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", "with-partition")
            .mode("append")
            .save()
        )
