"""Partitioned topics through Spark: one Spark partition per topic partition on read; key
routing (Pulsar's Murmur3-32 scheme), an explicit ``partition`` column or round-robin on
write; a streaming query picks up partitions added while it runs."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from client.sync import Client
from protocol.hashing import murmur3_32_hash
from tests.helpers import BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 4


def partitions_request(broker: BrokerThread, method: str, local_name: str, count: int) -> None:
    """``PUT`` (create) or ``POST`` (grow) a topic's ``/partitions`` in public/default."""
    request = urllib.request.Request(
        f"{broker.http}/admin/v2/persistent/public/default/{local_name}/partitions",
        data=json.dumps(count).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status in (200, 204)


def stored_by_partition(broker: BrokerThread, topic: str, count: int) -> list[list[Sent]]:
    return [consume_all(broker.url, f"{topic}-partition-{i}") for i in range(count)]


def client_partition_of(broker: BrokerThread, local_name: str, keys: list[str]) -> dict[str, int]:
    """Where our client's partitioned producer sends each key on a 4-partition topic.

    (Pulsar's cross-language scheme, Murmur3-32; the official Python client's default hash is
    the C++ core's BoostHash, which no other client reproduces.)
    """
    partitions_request(broker, "PUT", local_name, PARTITIONS)
    client = Client(broker.url)
    try:
        producer = client.create_producer(local_name, batching_enabled=False)
        return {key: producer.send(b"probe", partition_key=key).partition() for key in keys}
    finally:
        client.close()


def test_spark_connector_reads_and_writes_a_4_partition_topic(
    spark: Any, broker: BrokerThread
) -> None:
    topic = "persistent://public/default/spark-parted"
    partitions_request(broker, "PUT", "spark-parted", PARTITIONS)
    keys = [f"key-{i}" for i in range(12)]
    rows: list[tuple[bytes, str | None, int | None]] = []
    rows += [(f"keyed-{i}".encode(), keys[i % 12], None) for i in range(60)]
    rows += [(f"pinned-{i}".encode(), "key-0", i % PARTITIONS) for i in range(20)]  # wins over key
    rows += [(f"free-{i}".encode(), None, None) for i in range(40)]
    frame = spark.createDataFrame(rows, "value binary, key string, partition int").repartition(2)
    (
        frame.write.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .option("batchingMaxMessages", "5")
        .mode("append")
        .save()
    )

    stored = stored_by_partition(broker, topic, PARTITIONS)
    where = {message.value: index for index, part in enumerate(stored) for message in part}
    assert sorted(where) == sorted(value for value, _, _ in rows)  # each row once
    assert sum(len(part) for part in stored) == len(rows)
    # Keyed rows land where the client puts their key: Murmur3-32 of the key.
    official = client_partition_of(broker, "spark-parted-probe", keys)
    assert official == {key: murmur3_32_hash(key.encode()) % PARTITIONS for key in keys}
    for value, key, partition in rows:
        if partition is not None:
            assert where[value] == partition
        elif key is not None:
            assert where[value] == official[key], (value, key)
    # Keyless rows: round-robin by blocks of 5 rows, over every partition.
    free = Counter(where[value] for value, key, partition in rows if key is None)
    assert set(free) == set(range(PARTITIONS))

    read = (
        spark.read.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .load()
    )
    assert read.rdd.getNumPartitions() == PARTITIONS
    back = read.collect()
    assert sorted(row.value for row in back) == sorted(where)
    assert {row.topic for row in back} == {topic}
    assert all(row.partition == where[row.value] for row in back)
    # Offsets restart per partition: a JSON offset names the partition.
    first_of_2 = min(row.offset for row in back if row.partition == 2)
    after = (
        spark.read.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .option("startingOffsets", json.dumps({topic: {"2": first_of_2}}))
        .load()
        .collect()
    )
    assert Counter(row.partition for row in after) == Counter(row.partition for row in back)


def test_streaming_between_partitioned_topics_exactly_once_as_partitions_grow(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    source, sink = "stream-parted-in", "stream-parted-out"
    partitions_request(broker, "PUT", source, PARTITIONS)
    partitions_request(broker, "PUT", sink, 3)
    first = [Sent(f"a{i}".encode(), f"k{i % 7}".encode()) for i in range(80)]
    produce(broker.url, source, first, batching=True)

    def run() -> Any:
        query = (
            spark.readStream.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .load()
            # ``offset`` is not sent: it orders each task's rows (row_order), which keeps the
            # source's order per key; without it they would be numbered in content order.
            .select("value", "key", "offset")
            .writeStream.format("dedup-topic")
            .option("service.url", broker.url)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None
        return query

    def output() -> list[list[Sent]]:
        return stored_by_partition(broker, f"persistent://public/default/{sink}", 3)

    run()
    assert sorted(m.value for part in output() for m in part) == sorted(m.value for m in first)

    # Six partitions now: the two new ones join the query at their earliest message.
    partitions_request(broker, "POST", source, 6)
    second = [Sent(f"b{i}".encode(), f"k{i % 7}".encode()) for i in range(60)]
    produce(broker.url, source, second, batching=True)
    new_parts = [consume_all(broker.url, f"{source}-partition-{i}") for i in (4, 5)]
    assert any(new_parts)  # the keys do spread onto the new partitions
    query = run()
    assert sum(p["numInputRows"] for p in query.recentProgress) == len(second)

    out = output()
    values = [m.value for part in out for m in part]
    assert sorted(values) == sorted(m.value for m in first + second)  # each once
    # One key, one output partition; per key, the source's order is kept.
    for part in out:
        for key in {m.key for m in part}:
            mine = [m.value for m in part if m.key == key]
            sent = [m.value for m in first + second if m.key == key]
            assert mine == sent
    assert all(
        len({i for i, part in enumerate(out) if key in {m.key for m in part}}) == 1
        for key in {m.key for m in first}
    )
