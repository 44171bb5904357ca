"""Read a topic, transform, write another topic exactly once: the ``dedup-topic`` Spark connector.

With the broker running (``make run``), in another shell::

    .venv/bin/python examples/spark_pipeline.py            # seeds 'orders' with 100 messages
    .venv/bin/python examples/spark_pipeline.py --seed 0   # run again: only new input is processed

The query reads ``orders`` from its checkpoint position, upper-cases each value, keeps key,
properties and event time, and writes ``orders-upper`` exactly once (``Trigger.AvailableNow``:
everything available now, then stop). Run it again and nothing is written twice; delete
``--checkpoint`` to start over from ``startingOffsets``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from client.message_id import MessageId  # noqa: E402
from client.sync import Client  # noqa: E402
from spark_connector import configure_python_workers, register  # noqa: E402


def seed(url: str, topic: str, count: int) -> None:
    """Publish ``count`` messages to ``topic`` with our blocking client."""
    with Client(url) as client:
        producer = client.create_producer(topic)
        now = int(time.time() * 1000)
        for i in range(count):
            producer.send_async(
                f"order {i}".encode(),
                None,
                partition_key=f"customer-{i % 7}",
                properties={"source": "example"},
                event_timestamp=now + i,
            )
        producer.flush()


def count(url: str, topic: str) -> int:
    with Client(url) as client:
        reader = client.create_reader(topic, MessageId.earliest)
        total = 0
        while reader.has_message_available():
            reader.read_next(10_000)
            total += 1
        return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--source", default="orders")
    parser.add_argument("--sink", default="orders-upper")
    parser.add_argument("--seed", type=int, default=100, help="messages to publish first")
    parser.add_argument("--checkpoint", default=str(REPO / "data" / "spark-checkpoints" / "orders"))
    args = parser.parse_args()

    if args.seed:
        seed(args.service_url, args.source, args.seed)

    configure_python_workers()  # before the session: workers must run this venv's Python
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dedup-topic-example")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        query = (
            spark.readStream.format("dedup-topic")
            .option("service.url", args.service_url)
            .option("topic", args.source)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("upper(cast(value as string)) as value", "key", "properties", "eventTime")
            .writeStream.format("dedup-topic")
            .option("service.url", args.service_url)
            .option("topic", args.sink)
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        spark.stop()
    total = count(args.service_url, args.sink)
    print(f"processed {rows} new rows; {args.sink} now holds {total} messages")


if __name__ == "__main__":
    main()
