"""No silent expiry: a micro-batch replayed after the broker forgot its producers is refused.

Batch 1 fails after 6 rows are stored. The broker then forgets the sink's idle producer, as it
does after ``brokerDeduplicationProducerInactivityTimeoutMinutes``: its dedup clock is moved 7
hours on (the seam its own tests use), so the real purge runs. The restart replays batch 1 with
the sink told the broker's timeout (0.01 minutes, so the batch is already older): the query
fails with the sink's error. The control, the check turned off (0), shows what it prevents:
the 6 rows stored twice.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BrokerThread, wait_until
from tests.spark_connector.helpers import Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

INPUT = [Sent(f"row-{i}".encode(), f"k{i % 3}".encode()) for i in range(30)]
OUT = "persistent://public/default/expiry-out"
SHIFT_SECONDS = 7 * 3600.0


def start_query(spark: Any, url: str, tmp: Path, timeout_minutes: str | None) -> Any:
    writer = (
        spark.readStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "expiry-in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .writeStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", OUT)
        .option("batchingMaxMessages", "2")
        .option("testing.faultDir", str(tmp / "faults"))
        .option("checkpointLocation", str(tmp / "ckpt"))
    )
    if timeout_minutes is not None:
        writer = writer.option(
            "brokerDeduplicationProducerInactivityTimeoutMinutes", timeout_minutes
        )
    return writer.trigger(availableNow=True).start()


def forget_idle_producers(broker: BrokerThread, producer: str) -> None:
    """Move the output topic's dedup clock past the timeout and wait for the purge."""
    assert broker.broker is not None
    assert broker.broker.service is not None
    topic = broker.broker.service.topics[OUT]
    assert topic.last_sequence_id(producer) == (1 << 32) | 5  # batch 1, rows 0..5 stored
    topic.publisher._clock = lambda: time.monotonic() + SHIFT_SECONDS
    wait_until(lambda: topic.last_sequence_id(producer) == -1, timeout=30)


def test_a_replay_after_the_broker_forgot_is_refused(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    produce(broker.url, "expiry-in", INPUT)
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "write-b1-p0").write_text("6")
    query = start_query(spark, broker.url, tmp_path, None)
    with pytest.raises(Exception, match="injected failure after 6 rows"):
        query.awaitTermination(120)
    assert len(consume_all(broker.url, OUT)) == 16  # batch 0, then 6 rows of batch 1

    query_id = json.loads((tmp_path / "ckpt" / "metadata").read_text())["id"]
    forget_idle_producers(broker, f"spark-{query_id}-0")

    query = start_query(spark, broker.url, tmp_path, "0.01")
    with pytest.raises(Exception, match="refuses to replay the batch"):
        query.awaitTermination(120)
    assert len(consume_all(broker.url, OUT)) == 16  # nothing written

    # The control: the check off, the replay writes the 6 rows again.
    query = start_query(spark, broker.url, tmp_path, "0")
    assert query.awaitTermination(120)
    assert query.exception() is None
    counts = Counter(consume_all(broker.url, OUT))
    assert set(counts) == set(INPUT)
    assert sorted(counts.values()).count(2) == 6
