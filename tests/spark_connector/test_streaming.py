"""Streaming topic -> topic: AvailableNow, a processing-time trigger, maxOffsetsPerTrigger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce, sink_order, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def pipeline(spark: Any, url: str, source: str, sink: str, checkpoint: Path, **options: str) -> Any:
    """``readStream`` of ``source`` -> ``writeStream`` to ``sink`` (not started)."""
    reader = spark.readStream.format("dedup-topic").option("service.url", url)
    reader = reader.option("topic", source).option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
    )


def run_available_now(writer: Any) -> Any:
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    return query


def test_available_now_topic_to_topic_and_restart(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    first = [
        Sent(f"a{i}".encode(), f"k{i % 2}".encode(), (("n", str(i)),), 1_700_000_000_000 + i)
        for i in range(25)
    ]
    produce(broker.url, "an-in", first, batching=True)
    writer = pipeline(spark, broker.url, "an-in", "an-out", tmp_path / "ckpt")
    run_available_now(writer)
    assert consume_all(broker.url, "an-out") == first

    second = [Sent(f"b{i}".encode()) for i in range(6)]
    produce(broker.url, "an-in", second)
    run_available_now(pipeline(spark, broker.url, "an-in", "an-out", tmp_path / "ckpt"))
    assert consume_all(broker.url, "an-out") == first + second
    # Nothing new: a third run plans no batch and writes nothing.
    query = run_available_now(pipeline(spark, broker.url, "an-in", "an-out", tmp_path / "ckpt"))
    assert all(p["numInputRows"] == 0 for p in query.recentProgress)
    assert consume_all(broker.url, "an-out") == first + second


def test_processing_time_trigger_with_a_transform(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    produce(broker.url, "pt-in", [Sent(f"x{i}".encode()) for i in range(10)])
    query = (
        spark.readStream.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", "pt-in")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("upper(cast(value as string)) as value", "key")
        .writeStream.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", "pt-out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        # Each micro-batch is one task: its rows leave in the sink's order (no position column
        # is kept by the transform), and the micro-batches in order.
        first = sink_order([f"X{i}".encode() for i in range(10)])
        assert values(consume_all(broker.url, "pt-out")) == first
        produce(broker.url, "pt-in", [Sent(f"y{i}".encode()) for i in range(5)], batching=True)
        query.processAllAvailable()
    finally:
        query.stop()
    assert values(consume_all(broker.url, "pt-out")) == [
        *first,
        *sink_order([f"Y{i}".encode() for i in range(5)]),
    ]


def test_max_offsets_per_trigger_counts_entries(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Batched entries of 4 messages, a budget of 2 entries (counted from message ids, the
    payloads read once, by the executors): micro-batches of 8, 8 and 4 messages."""
    sent = [Sent(f"m{i}".encode()) for i in range(20)]
    produce(broker.url, "mo-in", sent, batching=True)
    writer = pipeline(
        spark, broker.url, "mo-in", "mo-out", tmp_path / "ckpt", maxOffsetsPerTrigger="2"
    )
    query = run_available_now(writer)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [8, 8, 4]
    assert consume_all(broker.url, "mo-out") == sent
