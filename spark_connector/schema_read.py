"""The source's schema-dependent columns: what ``schema()`` declares and ``read`` fills.

Planning (``value_ddl``): the latest schema of each topic read, as columns (``schema_columns``);
every topic of one query must give the same columns, as pulsar-spark requires without its
``allowDifferentTopicSchemas`` (read such topics with ``decodeSchema=false``). Reading
(``ValueLayout``): the layout is recovered from the schema Spark hands the reader, so executors
never re-plan; each message is decoded with *its own* schema version (``Message.schema_version``,
fetched once per process: ``schema_fetch``), and a field an older version lacks is null. A field
added after the query started has no column: the columns were fixed when it was planned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from client.message import Message
from client.sync import Client
from spark_connector.clients import partition_topics
from spark_connector.option_table import OptionError
from spark_connector.schema_columns import (
    METADATA,
    PRIMITIVES,
    RecordDecoder,
    parse_definition,
    record_ddl,
    record_fields,
)
from spark_connector.schema_fetch import TopicSchema, fetch_schema

__all__ = ["RAW_VALUE", "SchemaDecoder", "ValueLayout", "value_ddl"]

RAW_VALUE = "value binary"


def _topic_ddl(client: Client, topic: str) -> str:
    names, _ = partition_topics(client, topic)
    schema = fetch_schema(client, names[0])
    if schema is None:
        return RAW_VALUE
    if schema.is_record:
        return record_ddl(record_fields(parse_definition(schema.data)))
    primitive = PRIMITIVES.get(schema.type)
    return RAW_VALUE if primitive is None else f"value {primitive[0]}"


def value_ddl(client: Client, topics: list[str]) -> str:
    """The columns standing for the payload: ``value binary``, a typed ``value``, or the
    record's fields.

    Raises:
        OptionError: topics whose schemas give different columns; see ``schema_columns``.
    """
    found = {topic: _topic_ddl(client, topic) for topic in topics}
    kinds = set(found.values())
    if len(kinds) > 1:
        listing = "; ".join(f"{topic}: {ddl}" for topic, ddl in sorted(found.items()))
        raise OptionError(
            "dedup-topic: the topics read have different schemas (" + listing + "); read them "
            "in separate queries, or raw with decodeSchema=false"
        )
    return kinds.pop() if kinds else RAW_VALUE


@dataclass(frozen=True)
class ValueLayout:
    """Which columns of the reader's schema hold the payload, and their Arrow types.

    ``kind``: ``raw`` (the ``value`` binary column), ``primitive`` (a typed ``value``) or
    ``record`` (``fields``, in schema order, placed before the metadata columns).
    """

    kind: str
    fields: tuple[tuple[str, pa.DataType], ...] = ()

    @classmethod
    def of(cls, schema: Any) -> ValueLayout:
        """From the ``StructType`` Spark gives the reader."""
        from pyspark.sql.pandas.types import to_arrow_type

        def arrow(field: Any) -> pa.DataType:
            return to_arrow_type(field.dataType, timezone="UTC")

        fields = [(f.name, arrow(f)) for f in schema.fields if f.name not in METADATA]
        if fields:
            return cls("record", tuple(fields))
        value = next((f for f in schema.fields if f.name == "value"), None)
        if value is None or arrow(value) == pa.binary():
            return cls("raw")
        return cls("primitive", (("value", arrow(value)),))


class SchemaDecoder:
    """Decodes one partition's payloads into the layout's columns (``read`` side)."""

    def __init__(self, client: Client, topic: str, layout: ValueLayout) -> None:
        self._client = client
        self._topic = topic  # the partition's own topic: schemas are stored per topic
        self._layout = layout
        self._decoders: dict[bytes, Callable[[bytes], Any]] = {}

    def _decoder(self, version: bytes) -> Callable[[bytes], Any]:
        found = self._decoders.get(version)
        if found is None:
            schema = fetch_schema(self._client, self._topic, version or None)
            found = self._decoders[version] = self._make(schema, version)
        return found

    def _make(self, schema: TopicSchema | None, version: bytes) -> Callable[[bytes], Any]:
        where = f"{self._topic} schema version {int.from_bytes(version or b'', 'big')}"
        kind = self._layout.kind
        if schema is not None and kind == "record" and schema.is_record:
            return RecordDecoder(schema.type, schema.data)
        primitive = PRIMITIVES.get(schema.type) if schema is not None else None
        if kind == "primitive" and primitive is not None:
            return primitive[1]
        raise OptionError(
            f"dedup-topic: {where} is not the kind of schema the query was planned with "
            f"({kind}); read the topic with decodeSchema=false"
        )

    def columns(self, messages: list[Message]) -> list[tuple[str, pa.Array]]:
        """The payload columns of ``messages`` (a null payload is a null row)."""
        values = [self._decode(m) for m in messages]
        if self._layout.kind == "primitive":
            ((name, kind),) = self._layout.fields
            return [(name, pa.array(values, kind))]
        return [
            (name, pa.array([None if v is None else v.get(name) for v in values], kind))
            for name, kind in self._layout.fields
        ]

    def _decode(self, message: Message) -> Any:
        if message.has_null_value():
            return None
        try:
            return self._decoder(message.schema_version())(message.data())
        except OptionError:
            raise
        except Exception as exc:
            raise ValueError(
                f"dedup-topic: message {message.message_id()} of {self._topic} does not decode "
                f"with its schema ({exc}); read the topic with decodeSchema=false"
            ) from exc
