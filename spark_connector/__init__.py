"""Spark connector: ``format("dedup-topic")`` (PySpark Python Data Source API, pyspark 4.3).

Batch and streaming source, exactly-once sink through the broker's PIP-6 dedup. Use::

    from spark_connector import register, configure_python_workers
    configure_python_workers()            # before the SparkSession starts
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    register(spark)
    spark.readStream.format("dedup-topic").option("service.url", url).option("topic", t).load()

Modules, one line each:

* ``datasource``: the ``dedup-topic`` format; parses options, asks for topic schemas.
* ``options``: option parsing and the sink's column roles; ``option_table``: every option name
  (an error with a did-you-mean for an unknown one) and typed values; ``client_options``:
  ``client.*``/``pulsar.client.*``/``pulsar.reader.*``/``pulsar.producer.*`` for our client;
  ``auth``: ``authPluginClassName``/``authParams``; ``topics``: canonical topic names.
* Source: ``source`` (readers, Arrow batches), ``scan`` (reading a partition range),
  ``planner`` (micro-batch ends), ``budget`` (``maxOffsetsPerTrigger`` split fairly, counted
  in entries), ``probe`` (last id, id at a time, without pulling the backlog), ``admin``
  (``admin.url``: a partition's ledgers), ``splits`` (``minPartitions``), ``headers``
  (``includeHeaders``), ``range_check`` (a slow broker versus lost data), ``positions``
  (message positions and the packed ``offset`` column), ``offsets`` (checkpointed offset
  JSON), ``cursor`` (the durable subscription).
* Topic schemas: ``schema_fetch`` (GET_SCHEMA, cached per version), ``schema_columns`` (Avro
  -> Spark types, payload decoding), ``schema_read`` (the source's columns and decoder),
  ``schema_write`` (the sink's encoding with the topic's record schema).
* Sink: ``sink`` (writers), ``sink_identity`` (producer names, sequence ids, routing),
  ``rows`` (the input rows, column-wise), ``row_order`` (their order-free numbering, with
  spill), ``batches`` (replay-stable batch boundaries), ``replay_guard`` (a recomputed task
  against what an earlier attempt stored), ``replay_age`` (no replay after the broker may have
  forgotten), ``producer_cache`` (at-least-once producers kept across micro-batches).
* ``clients`` (per-process client cache), ``faults`` (test-only).

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
