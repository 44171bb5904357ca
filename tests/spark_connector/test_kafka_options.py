"""The Kafka connector's and pulsar-spark's options on a real local Spark: per-partition
``startingOffsets`` JSON, ``startingTimestamp``, a fair ``maxOffsetsPerTrigger`` over a
4-partition topic with uneven backlogs, ``minPartitions``, ``includeHeaders``, authentication
through ``authParams``, and an unknown option failing the query with a did-you-mean."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from broker.auth.token import create_secret_key, create_token
from client.sync import Client
from spark_connector.positions import pack
from tests.helpers import BrokerThread, broker_config
from tests.spark_connector.helpers import Sent, produce
from tests.spark_connector.test_partitioned import partitions_request

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PULSAR = "org.apache.pulsar."
JAVA_TOKEN = f"{PULSAR}client.impl.auth.AuthenticationToken"


def send(url: str, topic: str, values: list[str], **options: Any) -> list[int]:
    """Publish ``values`` one entry each; their ``offset`` column values."""
    client = Client(url, **options)
    try:
        producer = client.create_producer(topic)
        ids = [producer.send(value.encode()) for value in values]
        producer.close()
        return [pack(m.ledger_id(), m.entry_id(), m.batch_index()) for m in ids]
    finally:
        client.close()


def read(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("dedup-topic").option("service.url", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_per_partition_starting_offsets_json(spark: Any, broker: BrokerThread) -> None:
    partitions_request(broker, "PUT", "kafka-json", 3)
    topic = "persistent://public/default/kafka-json"
    for partition in range(3):
        offsets = send(
            broker.url, f"{topic}-partition-{partition}", [f"p{partition}-{i}" for i in range(4)]
        )
        if partition == 1:
            third = offsets[2]
    # Kafka's form: -2 earliest, -1 latest, else an offset column value; partition 2 left
    # out takes the default (earliest for a batch read).
    start = f'{{"kafka-json": {{"0": -1, "1": {third}}}}}'
    rows = read(spark, broker.url, topic="kafka-json", startingOffsets=start).collect()
    got = sorted((row.partition, row.value.decode()) for row in rows)
    assert got == [(1, "p1-2"), (1, "p1-3"), *((2, f"p2-{i}") for i in range(4))]


def test_starting_timestamp(spark: Any, broker: BrokerThread) -> None:
    send(broker.url, "kafka-time", ["old-0", "old-1"])
    mark = int(time.time() * 1000) + 1
    while int(time.time() * 1000) < mark:
        time.sleep(0.001)
    send(broker.url, "kafka-time", ["new-0", "new-1"])
    later = read(spark, broker.url, topic="kafka-time", startingTimestamp=str(mark))
    assert [row.value for row in later.orderBy("offset").collect()] == [b"new-0", b"new-1"]
    # pulsar-spark's name for Kafka's endingTimestamp: before the first message at ``mark``.
    earlier = read(spark, broker.url, topic="kafka-time", endingTime=str(mark))
    assert [row.value for row in earlier.orderBy("offset").collect()] == [b"old-0", b"old-1"]


def test_max_offsets_per_trigger_is_fair(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    """Backlogs of 24, 12, 4 and 2 entries, 8 per micro-batch: every micro-batch takes from
    every partition that still has a backlog (none waits for the others to drain)."""
    sizes = [24, 12, 4, 2]
    partitions_request(broker, "PUT", "fair-in", len(sizes))
    topic = "persistent://public/default/fair-in"
    for partition, size in enumerate(sizes):
        messages = [Sent(f"{partition}-{i}".encode()) for i in range(size)]
        produce(broker.url, f"{topic}-partition-{partition}", messages)
    batches: list[Counter[int]] = []

    def record(frame: Any, batch_id: int) -> None:
        counts = Counter(
            {row.partition: row["count"] for row in frame.groupBy("partition").count().collect()}
        )
        if counts:
            batches.append(counts)

    query = (
        spark.readStream.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "8")
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert batches[0] == Counter({0: 4, 1: 2, 2: 1, 3: 1})
    taken = Counter[int]()
    for counts in batches:
        behind = {p for p, size in enumerate(sizes) if taken[p] < size}
        assert set(counts) == behind, (counts, taken)
        taken.update(counts)
    assert [taken[p] for p in range(len(sizes))] == sizes


def test_min_partitions_and_headers(spark: Any, broker: BrokerThread) -> None:
    produce(
        broker.url,
        "kafka-split",
        [Sent(f"m{i}".encode(), properties=(("h", f"v{i}"),) if i % 2 else ()) for i in range(10)],
    )
    frame = read(spark, broker.url, topic="kafka-split", minPartitions="4", includeHeaders="true")
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.orderBy("offset").collect()
    assert [row.value for row in rows] == [f"m{i}".encode() for i in range(10)]
    assert [row.headers for row in rows[:2]] == [None, [("h", b"v1")]]
    assert "headers" not in read(spark, broker.url, topic="kafka-split").columns


def test_token_authentication_through_auth_params(spark: Any, tmp_path: Path) -> None:
    secret = create_secret_key()
    (tmp_path / "secret.key").write_bytes(secret)
    config = broker_config(
        tmp_path / "data",
        authentication_enabled=True,
        authentication_providers=f"{PULSAR}broker.authentication.AuthenticationProviderToken",
        token_secret_key=f"file://{tmp_path / 'secret.key'}",
    )
    broker = BrokerThread(config).start()
    try:
        from client.auth import AuthenticationToken

        token = create_token(secret, "spark-user")
        send(broker.url, "secured", ["s0", "s1"], authentication=AuthenticationToken(token))
        frame = read(
            spark,
            broker.url,
            topic="secured",
            **{
                "pulsar.client.authPluginClassName": JAVA_TOKEN,
                "pulsar.client.authParams": f"token:{token}",
            },
        )
        assert [row.value for row in frame.orderBy("offset").collect()] == [b"s0", b"s1"]
    finally:
        broker.stop()


def test_unknown_option_fails_the_query(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="did you mean 'maxOffsetsPerTrigger'"):
        read(spark, broker.url, topic="x", maxOffsetPerTrigger="5").collect()
    writer = (
        spark.readStream.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topic", "x")
        .load()
        .writeStream.format("dedup-topic")
        .option("service.url", broker.url)
        .option("topik", "y")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
    )
    with pytest.raises(Exception, match=r"unknown sink option 'topik'.*did you mean 'topic'"):
        run_to_end(writer)


def run_to_end(writer: Any) -> None:
    """Start a query and wait for it; its failure raised."""
    query = writer.start()
    assert query.awaitTermination(120)
    failure = query.exception()
    if failure is not None:
        raise failure
