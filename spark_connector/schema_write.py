"""The sink's schema encoding: a DataFrame's columns as a record of the topic's schema.

When the ``topic`` option names a topic whose latest schema is JSON or Avro, the input's
non-metadata columns (everything but ``key``, ``topic``, ``partition``, ``eventTime``,
``properties``, their ``__`` aliases, the source's read-only columns and ``exactlyOnce.orderBy``
columns) must be fields of that record: each column a field of a fitting type, each field left
out nullable or with a default. Planning checks this (``plan_encoding``) and fails with the
column named; the executors then encode every row (fastavro's schemaless writer, or
``json.dumps`` as ``client.schema.JsonSchema`` writes) into a ``value`` binary column appended to
the batch, so everything after (exactly-once sort key, batching, replay guard) sees the encoded
bytes. The producers declare that very schema (``DeclaredSchema``: the broker's stored bytes), so
the broker's compatibility check applies and the messages carry its version.

An input of only ``value`` (and metadata) keeps today's behaviour: the bytes are sent as they
are, with no schema declared. ``encodeSchema=false`` turns the whole thing off.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa

from protocol import pb
from spark_connector.option_table import OptionError
from spark_connector.options import SINK_ALIASES, SINK_COLUMNS, SINK_IGNORED
from spark_connector.schema_columns import parse_definition, record_fields, resolve
from spark_connector.schema_fetch import JSON, TopicSchema

__all__ = ["DeclaredSchema", "RecordEncoding", "plan_encoding"]

_METADATA = {*SINK_COLUMNS, *SINK_ALIASES, *SINK_IGNORED} - {"value"}
# Spark types a column may have for a field of another (integral and float widening).
_WIDENS = {
    "bigint": ("int", "smallint", "tinyint"),
    "int": ("smallint", "tinyint"),
    "smallint": ("tinyint",),
    "double": ("float", "int", "smallint", "tinyint"),
    "float": ("smallint", "tinyint"),
    "binary": (),
    "string": (),
}


@dataclass(frozen=True)
class DeclaredSchema:
    """What the sink's producers declare: the stored schema, byte for byte (so the broker
    finds its existing version); payloads are encoded already, so ``encode`` passes them."""

    declared: bytes

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def to_pb(self) -> pb.Schema:
        schema = pb.Schema()
        schema.ParseFromString(self.declared)
        return schema


@dataclass(frozen=True)
class RecordEncoding:
    """How one write encodes its rows: the input columns that are fields, and the schema."""

    schema_type: int
    definition: bytes
    declared: bytes
    columns: tuple[tuple[int, str], ...]  # (input column index, field name)

    @property
    def producer_schema(self) -> DeclaredSchema:
        return DeclaredSchema(self.declared)

    def encode(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch with the encoded ``value`` column appended."""
        encode = _encoder(self.schema_type, self.definition)
        for batch in batches:
            values = [batch.column(i).to_pylist() for i, _ in self.columns]
            names = [name for _, name in self.columns]
            rows = zip(*values, strict=True) if values else [()] * batch.num_rows
            encoded = [encode(dict(zip(names, row, strict=True))) for row in rows]
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(encoded, pa.binary())],
                names=[*batch.schema.names, "value"],
            )


@functools.lru_cache(maxsize=32)
def _encoder(schema_type: int, definition: bytes) -> Any:
    """Row dict -> payload bytes for one schema (parsed once per process)."""
    parsed = parse_definition(definition)
    named: dict[str, Any] = {}
    convert = _writer(parsed, named, schema_type == JSON)
    if schema_type == JSON:

        def to_json(row: dict[str, Any]) -> bytes:
            return json.dumps(convert(row), indent=True).encode("utf-8")

        return to_json
    avro = fastavro.parse_schema(parsed)

    def to_avro(row: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, avro, convert(row))
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"dedup-topic sink: a row does not fit the topic's schema: {exc}"
            ) from exc
        return buffer.getvalue()

    return to_avro


def _writer(schema: Any, named: dict[str, Any], to_json: bool) -> Any:
    """Arrow's Python values -> what fastavro / ``json`` writes for an Avro type."""
    schema = resolve(schema, named)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            inner = _writer(branches[0], named, to_json)
            return lambda v: None if v is None else inner(v)
        members = [_writer(b, named, to_json) for b in branches]
        return lambda v: _member(v, members)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and kind in ("record", "enum", "fixed"):
        named[schema["name"]] = schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if kind == "record":
        fields = [(f["name"], _writer(f["type"], named, to_json)) for f in schema["fields"]]
        # A field the input lacks stays out: fastavro then writes its default.
        return lambda v: None if v is None else {n: w(v[n]) for n, w in fields if n in v}
    if kind == "array":
        item = _writer(schema["items"], named, to_json)
        return lambda v: None if v is None else [item(x) for x in v]
    if kind == "map":
        value = _writer(schema["values"], named, to_json)
        # Arrow gives a map as (key, value) pairs; struct-typed input gives a dict.
        return lambda v: None if v is None else {k: value(x) for k, x in dict(v).items()}
    if to_json:
        return _json_scalar(kind, logical)
    return _same


def _same(value: Any) -> Any:
    return value


def _member(value: Any, members: list[Any]) -> Any:
    """A ``memberN`` struct (``schema_columns``) back to its one set branch."""
    if not isinstance(value, dict):
        return value
    for i, write in enumerate(members):
        found = value.get(f"member{i}")
        if found is not None:
            return write(found)
    return None


def _json_scalar(kind: str, logical: str | None) -> Any:
    if kind in ("bytes", "fixed") and logical != "decimal":
        return lambda v: v.decode("utf-8") if isinstance(v, bytes) else v
    if logical in ("timestamp-millis", "timestamp-micros"):
        scale = 1000 if logical == "timestamp-millis" else 1_000_000
        return lambda v: round(v.timestamp() * scale) if isinstance(v, dt.datetime) else v
    if logical == "date":
        return lambda v: (v - dt.date(1970, 1, 1)).days if isinstance(v, dt.date) else v
    return _same


def _fits(column: str, field: str) -> bool:
    column, field = column.replace(" ", ""), field.replace("`", "").replace(" ", "")
    return column == field or column in _WIDENS.get(field, ())


def plan_encoding(
    schema: TopicSchema, fields: list[tuple[str, str]], order_by: tuple[str, ...]
) -> RecordEncoding | None:
    """The encoding of an input (``(name, simpleString type)`` columns) for ``schema``; None
    when the input is only ``value`` and metadata (sent as it is).

    Raises:
        OptionError: a column that is not a field, of a type that does not fit, a required
            field missing, or ``value`` given next to fields.
    """
    definition = parse_definition(schema.data)
    wanted = dict(record_fields(definition))
    # An exactlyOnce.orderBy column that is no field only orders the rows: it is not sent.
    data = [
        (i, n, t)
        for i, (n, t) in enumerate(fields)
        if n not in _METADATA and (n in wanted or n not in order_by)
    ]
    names = [n for _, n, _ in data]
    if names == ["value"]:
        return None
    if "value" in names:
        raise OptionError(
            "dedup-topic sink: the topic has a record schema: give its fields as columns, or "
            "only a 'value' column of encoded bytes, not both (or set encodeSchema=false)"
        )
    for _, name, kind in data:
        if name not in wanted:
            raise OptionError(
                f"dedup-topic sink: column {name!r} is not a field of the topic's schema "
                f"(fields: {', '.join(wanted)}; set encodeSchema=false to send 'value' bytes)"
            )
        if not _fits(kind, wanted[name]):
            raise OptionError(
                f"dedup-topic sink: column {name!r} has type {kind}, the topic's schema field "
                f"wants {wanted[name].replace('`', '')}"
            )
    for field in definition["fields"]:
        if field["name"] not in names and not _optional(field):
            raise OptionError(
                f"dedup-topic sink: the topic's schema field {field['name']!r} is required "
                "(not nullable, no default) and the input has no such column"
            )
    return RecordEncoding(
        schema.type, schema.data, schema.declared, tuple((i, n) for i, n, _ in data)
    )


def _optional(field: dict[str, Any]) -> bool:
    kind = field["type"]
    return "default" in field or (isinstance(kind, list) and "null" in kind)
