"""``DedupTopicDataSource``: the ``dedup-topic`` format (PySpark Python Data Source API).

Every method runs in a Python worker Spark spawns (never in the user's driver process), so this
class only parses options: the reader and writer objects it returns are pickled to other
processes and open their broker clients lazily (``clients``). Options are checked here, at
planning time, so a bad option or an unknown sink column fails before any task runs.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_connector.option_table import parse_bool
from spark_connector.options import SinkOptions, SourceOptions, order_columns, sink_column_plan
from spark_connector.sink import BatchWriter, StreamWriter
from spark_connector.source import BatchReader, StreamReader, source_schema

__all__ = ["DedupTopicDataSource"]


def _plan(options: SinkOptions, schema: StructType) -> tuple[dict[str, int], tuple[int, ...]]:
    """The sink's column roles and its ordering columns (``row_order``)."""
    fields = [(field.name, field.dataType.simpleString()) for field in schema.fields]
    plan = sink_column_plan(fields, options.topic, options.order_by)
    return plan, order_columns(fields, options.order_by)


class DedupTopicDataSource(DataSource):
    """``spark.read/readStream.format("dedup-topic")`` and ``df.write/writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "dedup-topic"

    def schema(self) -> str:
        # Only ``includeHeaders`` shapes the schema; every option is checked by the reader.
        raw = self.options.get("includeHeaders")
        return source_schema(raw is not None and parse_bool("includeHeaders", raw))

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        options = SinkOptions.parse(self.options)
        return BatchWriter(options, *_plan(options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        options = SinkOptions.parse(self.options)
        return StreamWriter(options, *_plan(options, schema))
