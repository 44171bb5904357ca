"""A ``local[2,3]`` Spark job for ``test_reorder_retry`` (a subprocess: one JVM per process).

Each scenario writes 120 rows after a shuffle (``repartition(2, "key")``); Spark partition 0 of
the write fails after 6 rows are stored (the ``write-b0-p0`` fault marker), and ``local[2,3]``
retries it in the same run. The test-only reorder step (an RDD ``mapPartitions`` right before
the sink, in the same task) stands for a shuffle fetching its blocks in another order on the
retry, which local mode never does by itself: a retried attempt (``attemptNumber() > 0``)
gets its rows reversed (``permute``), or reversed without the row the sink numbers first
(``drop``: the set changed, as with a nondeterministic upstream; the first row in the sink's
order, the smallest ``rowhash64`` of the value, so that every stored index moves). Results go
to ``<work>/results.json``: ``"ok"`` or the error text, per scenario. It uses only options the
sink has had from the start.

Usage: ``python -m tests.spark_connector.reorder_job <service url> <work dir>``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spark_connector import configure_python_workers, register
from tests.spark_connector.helpers import SESSION_CONF

ROWS = [(f"k{i % 10}", f"v{i:03d}") for i in range(120)]
SCHEMA = "key string, value string"


def reorder_on_retry(rows: Iterator[Any], drop: bool) -> Iterator[Any]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() == 0:
        yield from rows
        return
    rows_list = list(rows)
    if drop and rows_list:
        from protocol.row_hash import row_hash64

        first = min(rows_list, key=lambda r: (row_hash64(r["value"].encode()), r["value"]))
        rows_list.remove(first)
    yield from reversed(rows_list)


def permute(rows: Iterator[Any]) -> Iterator[Any]:
    return reorder_on_retry(rows, drop=False)


def permute_and_drop(rows: Iterator[Any]) -> Iterator[Any]:
    return reorder_on_retry(rows, drop=True)


def run(spark: Any, url: str, work: Path, name: str, reorder: Any) -> str:
    faults = work / f"faults-{name}"
    faults.mkdir()
    (faults / "write-b0-p0").write_text("6")
    try:
        shuffled = spark.createDataFrame(ROWS, SCHEMA).repartition(2, "key")
        (
            spark.createDataFrame(shuffled.rdd.mapPartitions(reorder), SCHEMA)
            .write.format("dedup-topic")
            .option("service.url", url)
            .option("topic", f"reorder-{name}")
            .option("writeId", name)
            .option("batchingMaxMessages", "2")
            .option("testing.faultDir", str(faults))
            .mode("append")
            .save()
        )
    except Exception as exc:
        return str(exc)
    finally:
        if (faults / "write-b0-p0").exists():
            raise SystemExit("the fault did not fire")
    return "ok"


def main(url: str, work: Path) -> None:
    configure_python_workers()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2,3]").appName("dedup-topic-reorder")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        results = {
            "permute": run(spark, url, work, "permute", permute),
            "drop": run(spark, url, work, "drop", permute_and_drop),
        }
    finally:
        spark.stop()
    (work / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
