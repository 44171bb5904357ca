"""The source's durable cursor and topic selection (topics csv, topicsPattern)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BrokerThread, topic_stats
from tests.spark_connector.helpers import Sent, consume_all, produce, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def spark_subscriptions(http: str, topic: str) -> dict[str, Any]:
    subscriptions: dict[str, Any] = topic_stats(http, topic)["subscriptions"]
    return {name: sub for name, sub in subscriptions.items() if name.startswith("spark-")}


def test_commit_moves_the_durable_cursor(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    """Entries of 4 messages, micro-batches of 7 entries, then more."""
    topic = "persistent://public/default/cursor-in"
    produce(broker.url, topic, [Sent(f"c{i}".encode()) for i in range(20)], batching=True)

    def run() -> None:
        query = (
            spark.readStream.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "7")
            .load()
            .writeStream.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", "cursor-out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None

    run()
    (name, sub), *others = spark_subscriptions(broker.http, topic).items()
    assert not others
    # Every batch end is committed (the last one when Spark plans the next); the cursor stays
    # one entry behind the end (after the last entry): only entry 4 is left.
    assert sub["msgBacklog"] == 1
    produce(broker.url, topic, [Sent(f"d{i}".encode()) for i in range(5)])  # 5 entries
    run()
    assert spark_subscriptions(broker.http, topic)[name]["msgBacklog"] == 1
    assert len(consume_all(broker.url, "cursor-out")) == 25


def test_batch_read_of_several_topics(spark: Any, broker: BrokerThread) -> None:
    for name in ("multi-a", "multi-b", "other-c"):
        produce(broker.url, name, [Sent(f"{name}-{i}".encode()) for i in range(3)])
    source = spark.read.format("dedup-topic").option("service.url", broker.url)
    by_list = source.option("topics", "multi-a,multi-b").load().orderBy("topic", "offset")
    rows = by_list.collect()
    assert [row.value for row in rows] == [
        *(f"multi-a-{i}".encode() for i in range(3)),
        *(f"multi-b-{i}".encode() for i in range(3)),
    ]
    by_pattern = (
        spark.read.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topicsPattern", "persistent://public/default/multi-.*")
        .load()
        .orderBy("topic", "offset")
    )
    assert [row.value for row in by_pattern.collect()] == [row.value for row in rows]
    assert values(consume_all(broker.url, "other-c")) == [f"other-c-{i}".encode() for i in range(3)]
