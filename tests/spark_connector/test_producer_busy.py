"""A zombie holding the sink task's producer name: bounded retry, then the write goes through."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from client.sync import Client
from tests.helpers import BrokerThread
from tests.spark_connector.helpers import consume_all, sink_order, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def write(spark: Any, url: str, busy_timeout_ms: int) -> None:
    frame = spark.createDataFrame([(f"v{i}",) for i in range(10)], "value string").coalesce(1)
    (
        frame.write.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "busy-out")
        .option("writeId", "fixed")
        .option("producerBusyTimeoutMs", str(busy_timeout_ms))
        .mode("append")
        .save()
    )


def test_producer_busy_is_retried_for_a_bounded_time(spark: Any, broker: BrokerThread) -> None:
    with Client(broker.url) as client:
        zombie = client.create_producer("busy-out", producer_name="spark-fixed-0")
        with pytest.raises(Exception, match=r"ProducerBusy|already connected"):
            write(spark, broker.url, 300)
        # The zombie goes away while the task retries: the write then succeeds.
        releaser = threading.Timer(1.0, zombie.close)
        releaser.start()
        try:
            write(spark, broker.url, 60_000)
        finally:
            releaser.join()
    assert values(consume_all(broker.url, "busy-out")) == sink_order(
        [f"v{i}".encode() for i in range(10)]
    )
    # Same writeId again: every row is a duplicate, nothing new is stored.
    write(spark, broker.url, 60_000)
    assert len(consume_all(broker.url, "busy-out")) == 10
