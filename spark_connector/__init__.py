"""Spark connector: ``format("dedup-topic")`` (PySpark Python Data Source API, pyspark 4.3).

Batch and streaming source, exactly-once sink through the broker's PIP-6 dedup. Use::

    from spark_connector import register, configure_python_workers
    configure_python_workers()            # before the SparkSession starts
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    register(spark)
    spark.readStream.format("dedup-topic").option("service.url", url).option("topic", t).load()

Modules: ``options`` (option parsing and sink columns), ``positions`` (message positions and the
packed ``offset`` column), ``offsets`` (checkpointed offset JSON), ``scan`` (reading a partition
range), ``planner`` (micro-batch ends), ``cursor`` (the durable subscription), ``source``,
``sink``, ``rows`` (the sink's input rows), ``row_order`` (their order-free numbering, with
spill), ``replay_guard`` (a recomputed task against what an earlier attempt stored),
``replay_age`` (no replay after the broker may have forgotten), ``batches`` (the sink's
replay-stable batch boundaries), ``datasource``, ``clients`` (per-process client cache),
``faults`` (test-only).
Importing this package does not import pyspark; ``register`` does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["configure_python_workers", "register"]


def configure_python_workers() -> None:
    """Point Spark's Python workers at this interpreter (call before the session starts).

    Without it the workers run ``python3`` from PATH, which may lack pyarrow and this package;
    the JVM and its workers inherit the environment only when they start.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def register(spark: Any) -> None:
    """Register the ``dedup-topic`` data source with ``spark`` (a ``SparkSession``)."""
    from spark_connector.datasource import DedupTopicDataSource

    spark.dataSource.register(DedupTopicDataSource)
