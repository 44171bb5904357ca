"""``DedupTopicDataSource``: the ``dedup-topic`` format (PySpark Python Data Source API).

Every method runs in a Python worker Spark spawns (never in the user's driver process), so this
class only parses options and asks the broker for the topic schemas: the reader and writer
objects it returns are pickled to other processes and open their broker clients lazily
(``clients``). Options are checked here, at planning time, so a bad option, an unknown sink
column or a DataFrame that does not fit the topic's schema fails before any task runs.

Topic schemas (``schema_read``, ``schema_write``): ``schema()`` declares a JSON/Avro topic's
fields (or a primitive schema's typed ``value``) as columns unless ``decodeSchema=false``; the
reader recovers that layout from the schema Spark hands it. The sink encodes rows with the
``topic`` option's record schema unless ``encodeSchema=false``.
"""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_connector.clients import partition_topics, shared_client
from spark_connector.options import SinkOptions, SourceOptions, order_columns, sink_column_plan
from spark_connector.planner import Planner
from spark_connector.schema_fetch import fetch_schema
from spark_connector.schema_read import RAW_VALUE, ValueLayout, value_ddl
from spark_connector.schema_write import plan_encoding
from spark_connector.sink import BatchWriter, StreamWriter
from spark_connector.source import BatchReader, StreamReader, source_schema

__all__ = ["DedupTopicDataSource"]

Plan = tuple[SinkOptions, dict[str, int], tuple[int, ...]]


def _plan(options: SinkOptions, schema: StructType) -> Plan:
    """The sink's options (with the schema encoding, if any), its column roles and its
    ordering columns (``row_order``)."""
    fields = [(field.name, field.dataType.simpleString()) for field in schema.fields]
    encoding = None
    if options.encode_schema and options.topic is not None:
        client = shared_client(options.service_url, options.client_options)
        names, _ = partition_topics(client, options.topic)
        stored = fetch_schema(client, names[0])
        if stored is not None and stored.is_record:
            encoding = plan_encoding(stored, fields, options.order_by)
    if encoding is None:
        plan = sink_column_plan(fields, options.topic, options.order_by)
        return options, plan, order_columns(fields, options.order_by)
    # The encoded bytes become a ``value`` column appended to each batch (``schema_write``).
    fields_out = [*fields, ("value", "binary")]
    sent = {i for i, _ in encoding.columns}
    kept = [i for i in range(len(fields_out)) if i not in sent]
    local = sink_column_plan([fields_out[i] for i in kept], options.topic, options.order_by)
    plan = {role: kept[index] for role, index in local.items()}
    options = dataclasses.replace(options, encoding=encoding)
    return options, plan, order_columns(fields_out, options.order_by)


class DedupTopicDataSource(DataSource):
    """``spark.read/readStream.format("dedup-topic")`` and ``df.write/writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "dedup-topic"

    def schema(self) -> str:
        options = SourceOptions.parse(self.options)
        value = RAW_VALUE
        if options.decode_schema:
            client = shared_client(options.service_url, options.client_options)
            value = value_ddl(client, Planner(options).topics())
        return source_schema(options.include_headers, value)

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(SourceOptions.parse(self.options), ValueLayout.of(schema))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(SourceOptions.parse(self.options), ValueLayout.of(schema))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(*_plan(SinkOptions.parse(self.options), schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(*_plan(SinkOptions.parse(self.options), schema))
