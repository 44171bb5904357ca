"""``df.write`` inside ``foreachBatch``: the micro-batch's identity, one ``writeId`` per write.

A batch write's tasks inside ``foreachBatch`` carry the query id and batch id (Spark's local
properties), so a replayed micro-batch re-runs each write under the same producer names and
sequence ids; two writes to one topic in a micro-batch are told apart by their ``writeId``.
Without one, the second write reuses the first one's identity, and the replay guard fails it
instead of dropping its rows as duplicates of the first's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

INPUT = [Sent(f"row-{i}".encode(), f"k{i % 3}".encode()) for i in range(30)]


def write(df: Any, url: str, tmp: Path, write_id: str | None) -> None:
    writer = (
        df.write.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "fb-out")
        .option("batchingMaxMessages", "2")
        .option("testing.faultDir", str(tmp / "faults"))
    )
    if write_id is not None:
        writer = writer.option("writeId", write_id)
    writer.mode("append").save()


def start_query(spark: Any, url: str, tmp: Path, write_ids: list[str | None]) -> Any:
    def each_batch(df: Any, batch_id: int) -> None:
        for index, write_id in enumerate(write_ids):
            write(df.selectExpr(f"concat(value, '/{index}') as value", "key"), url, tmp, write_id)

    return (
        spark.readStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "fb-in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )


def expected(copies: int) -> Counter[Sent]:
    return Counter(
        Sent(m.value + f"/{index}".encode(), m.key) for m in INPUT for index in range(copies)
    )


def test_two_writes_per_batch_with_write_ids_survive_a_replay(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    produce(broker.url, "fb-in", INPUT)
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "write-b1-p0").write_text("4")  # the first write of batch 1 fails
    query = start_query(spark, broker.url, tmp_path, ["upper", "copy"])
    with pytest.raises(Exception, match="injected failure after 4 rows"):
        query.awaitTermination(120)
    query = start_query(spark, broker.url, tmp_path, ["upper", "copy"])
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(consume_all(broker.url, "fb-out")) == expected(2)


def test_a_second_write_without_its_own_write_id_fails(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    produce(broker.url, "fb-in", INPUT)
    query = start_query(spark, broker.url, tmp_path, [None, None])
    with pytest.raises(Exception, match="share an identity"):
        query.awaitTermination(120)
    written = Counter(consume_all(broker.url, "fb-out"))
    assert max(written.values()) == 1
    assert set(written) <= set(expected(1))  # only the first write's rows
