"""A ``local[2,3]`` Spark job for ``test_spill_retry`` (a subprocess: one JVM per process).

Like ``reorder_job``, but each task's rows far exceed ``exactlyOnce.sortBufferBytes``, so the
sink's sort spills them into many runs and merges those (``run_merge``): the rows reach the
sink in record batches of ``BATCH_ROWS`` (``spark.sql.execution.arrow.maxRecordsPerBatch``),
several per buffer. 3000 rows of 100-byte values sharing a 94-byte prefix go through a
shuffle (``repartition(2, "key")``); Spark partition 0 of the write fails after ``FAULT_ROWS``
rows are stored (the ``write-b0-p0`` fault marker) and ``local[2,3]`` retries it, its rows
reversed by the test-only reorder step (``reorder_job.permute``): other runs, cut at other
rows. ``results.json`` in the work
directory holds ``"ok"`` or the error text.

Usage: ``python -m tests.spark_connector.spill_retry_job <service url> <work dir>``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from spark_connector import configure_python_workers, register
from tests.spark_connector.helpers import SESSION_CONF
from tests.spark_connector.reorder_job import SCHEMA, permute

ROWS = [(f"k{i % 10}", "x" * 94 + f"{i:06d}") for i in range(3000)]
#: About 1/10 of a task's rows (~1500 rows of over 100 bytes each): ~10 runs per task.
SORT_BUFFER_BYTES = 16_000
FAULT_ROWS = 700
BATCH_ROWS = 50


def main(url: str, work: Path) -> None:
    configure_python_workers()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2,3]").appName("dedup-topic-spill-retry")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    # The sink gets a task's rows as record batches of this many rows: several per buffer,
    # so the buffer fills, spills and fills again (one batch past it would be one run).
    builder = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    faults = work / "faults"
    faults.mkdir()
    (faults / "write-b0-p0").write_text(str(FAULT_ROWS))
    try:
        shuffled = spark.createDataFrame(ROWS, SCHEMA).repartition(2, "key")
        reorder: Any = permute  # the retried attempt's rows reversed
        (
            spark.createDataFrame(shuffled.rdd.mapPartitions(reorder), SCHEMA)
            .write.format("dedup-topic")
            .option("service.url", url)
            .option("topic", "spill-retry")
            .option("writeId", "spill")
            .option("batchingMaxMessages", "50")
            .option("exactlyOnce.sortBufferBytes", str(SORT_BUFFER_BYTES))
            .option("testing.faultDir", str(faults))
            .mode("append")
            .save()
        )
        result = "ok"
    except Exception as exc:
        result = str(exc)
    finally:
        spark.stop()
    if (faults / "write-b0-p0").exists():
        raise SystemExit("the fault did not fire")
    (work / "results.json").write_text(json.dumps({"spill": result}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
