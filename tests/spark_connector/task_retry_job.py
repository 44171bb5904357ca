"""A ``local[2,3]`` Spark job for ``test_task_retry`` (run in a subprocess: one JVM per process).

``local[N]`` never retries a failed task; ``local[2,3]`` allows 3 attempts, so a task that fails
mid-write is retried inside the same run with the same batch id and partition. Runs the query
twice, exactly-once then at-least-once, each with a one-shot mid-write failure.

Usage: ``python -m tests.spark_connector.task_retry_job <service url> <work dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from spark_connector import configure_python_workers, register
from tests.spark_connector.helpers import SESSION_CONF


def main(url: str, work: Path) -> None:
    configure_python_workers()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2,3]").appName("dedup-topic-retry")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        for mode in ("true", "false"):
            faults = work / f"faults-{mode}"
            faults.mkdir()
            (faults / "write-b1-p0").write_text("6")
            query = (
                spark.readStream.format("dedup-topic")
                .option("service.url", url)
                .option("topic", "retry-in")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "10")
                .load()
                .writeStream.format("dedup-topic")
                .option("service.url", url)
                .option("topic", f"retry-out-{mode}")
                .option("exactlyOnce", mode)
                .option("batchingMaxMessages", "4")
                .option("testing.faultDir", str(faults))
                .option("checkpointLocation", str(work / f"ckpt-{mode}"))
                .trigger(availableNow=True)
                .start()
            )
            if not query.awaitTermination(120):
                raise SystemExit("query did not finish")
            if (faults / "write-b1-p0").exists():
                raise SystemExit("the fault did not fire")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
