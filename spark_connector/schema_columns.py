"""A topic schema as Spark columns, and payloads decoded into them (as pulsar-spark reads).

Pure (no I/O, no pyspark). A JSON or Avro schema's record (its Avro definition) becomes one
top-level column per field, next to the source's metadata columns; a primitive schema
(STRING, BOOLEAN, INT8..INT64, FLOAT, DOUBLE) becomes a typed ``value`` column; BYTES, no schema
and the types not mapped here (PROTOBUF, KEY_VALUE, ...) keep the raw ``value binary`` column.

Avro -> Spark (Spark's own Avro connector's rules, which pulsar-spark follows): boolean, int,
long, float, double, string; bytes and fixed -> binary; enum -> string; array -> array; map ->
map<string,..>; record -> struct; the logical types date, timestamp-millis/-micros and decimal
-> date, timestamp, decimal(p,s); a union with null -> its other branch, nullable; [int, long]
-> bigint and [float, double] -> double; any other union -> a struct of ``member0``,
``member1``... with the branch a value matched set (Spark's Avro connector does the same).

A field named like a metadata column (``METADATA``) is an error naming it: silently renaming or
dropping either would lose data without a word; ``decodeSchema=false`` reads such a topic raw.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro

from spark_connector.option_table import OptionError

__all__ = [
    "METADATA",
    "PRIMITIVES",
    "Converter",
    "RecordDecoder",
    "converter",
    "decode_primitive",
    "parse_definition",
    "record_ddl",
    "record_fields",
    "resolve",
    "spark_type",
]

# Every column the source may add itself (``value`` only for raw or primitive topics).
METADATA = frozenset(
    {
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "messageId",
        "publishTime",
        "eventTime",
        "producerName",
        "sequenceId",
        "properties",
        "headers",
    }
)
# pb.Schema.Type -> (Spark type, payload decoder): Pulsar's fixed-size big-endian encodings.
PRIMITIVES: dict[int, tuple[str, Callable[[bytes], Any]]] = {
    1: ("string", lambda data: data.decode("utf-8")),
    5: ("boolean", lambda data: data != b"\x00"),
    6: ("tinyint", lambda data: struct.unpack(">b", data)[0]),
    7: ("smallint", lambda data: struct.unpack(">h", data)[0]),
    8: ("int", lambda data: struct.unpack(">i", data)[0]),
    9: ("bigint", lambda data: struct.unpack(">q", data)[0]),
    10: ("float", lambda data: struct.unpack(">f", data)[0]),
    11: ("double", lambda data: struct.unpack(">d", data)[0]),
}
_SIMPLE = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
    "fixed": "binary",
    "enum": "string",
}
_LOGICAL = {
    ("int", "date"): "date",
    ("long", "timestamp-millis"): "timestamp",
    ("long", "timestamp-micros"): "timestamp",
}
Converter = Callable[[Any], Any]


def parse_definition(data: bytes) -> dict[str, Any]:
    """A JSON/Avro schema's record definition.

    Raises:
        OptionError: not an Avro record (the connector maps records only).
    """
    definition = json.loads(data)
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise OptionError(
            "dedup-topic: the topic's schema is not an Avro record; read it with decodeSchema=false"
        )
    return definition


def record_fields(definition: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field name, Spark DDL type)`` of each field of a record definition.

    Raises:
        OptionError: a field named like a metadata column, or an Avro type with no mapping.
    """
    named: dict[str, Any] = {}
    _register(definition, named)
    out = []
    for field in definition["fields"]:
        name = field["name"]
        if name in METADATA:
            raise OptionError(
                f"dedup-topic: schema field {name!r} has the name of a metadata column "
                f"({', '.join(sorted(METADATA))}); read the topic with decodeSchema=false "
                "(write it with encodeSchema=false)"
            )
        out.append((name, spark_type(field["type"], named)))
    return out


def record_ddl(fields: list[tuple[str, str]]) -> str:
    """The fields as top-level DDL columns."""
    return ", ".join(f"`{name}` {kind}" for name, kind in fields)


def _register(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        named[name] = schema
        if schema.get("namespace"):
            named[f"{schema['namespace']}.{name}"] = schema


def resolve(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return schema["type"]
    return schema


def _branches(union: list[Any]) -> list[Any]:
    return [branch for branch in union if branch != "null"]


def spark_type(schema: Any, named: dict[str, Any]) -> str:
    """The Spark DDL type of an Avro type (see the module docstring).

    Raises:
        OptionError: a type with no mapping (a bare ``null``).
    """
    schema = resolve(schema, named)
    if isinstance(schema, list):
        branches = _branches(schema)
        kinds = sorted(str(resolve(b, named)) for b in branches)
        if len(branches) == 1:
            return spark_type(branches[0], named)
        if kinds == ["int", "long"]:
            return "bigint"
        if kinds == ["double", "float"]:
            return "double"
        members = [f"member{i}:{spark_type(b, named)}" for i, b in enumerate(branches)]
        return f"struct<{','.join(members)}>"
    kind = schema["type"] if isinstance(schema, dict) else schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "decimal":
        return f"decimal({schema['precision']},{schema.get('scale', 0)})"
    found = _LOGICAL.get((str(kind), str(logical)))
    if found is not None:
        return found
    if kind in _SIMPLE:
        if isinstance(schema, dict):
            _register(schema, named)
        return _SIMPLE[kind]
    if kind == "array":
        return f"array<{spark_type(schema['items'], named)}>"
    if kind == "map":
        return f"map<string,{spark_type(schema['values'], named)}>"
    if kind == "record":
        _register(schema, named)
        inner = [f"`{f['name']}`:{spark_type(f['type'], named)}" for f in schema["fields"]]
        return f"struct<{','.join(inner)}>"
    raise OptionError(f"dedup-topic: the Avro type {json.dumps(schema)} has no Spark type")


# --- decoding --------------------------------------------------------------------------------


def converter(schema: Any, named: dict[str, Any], from_json: bool) -> Converter | None:
    """What turns a decoded value into its column's Python value, None when it already is.

    JSON payloads carry bytes as text and enums by value (``client.schema.JsonSchema``); a
    complex union becomes its ``memberN`` struct.
    """
    schema = resolve(schema, named)
    if isinstance(schema, list):
        return _union_converter(schema, named, from_json)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and kind in ("record", "enum", "fixed"):
        _register(schema, named)
    if from_json and kind in ("bytes", "fixed") and not isinstance(schema, dict):
        return _text_bytes
    if from_json and kind in ("bytes", "fixed"):
        return _text_bytes if schema.get("logicalType") != "decimal" else None
    if from_json and kind == "enum":
        return _enum_text
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if from_json and logical in _JSON_TIMES:
        return _JSON_TIMES[logical]
    if kind == "array":
        item = converter(schema["items"], named, from_json)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if kind == "map":
        value = converter(schema["values"], named, from_json)
        if value is None:
            return None
        return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
    if kind == "record":
        return _record_converter(schema, named, from_json)
    return None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# JSON carries Avro's time logical types as their numbers (what ``schema_write`` writes).
_JSON_TIMES: dict[str, Converter] = {
    "timestamp-millis": lambda v: _EPOCH + dt.timedelta(milliseconds=v) if v is not None else v,
    "timestamp-micros": lambda v: _EPOCH + dt.timedelta(microseconds=v) if v is not None else v,
    "date": lambda v: dt.date(1970, 1, 1) + dt.timedelta(days=v) if v is not None else v,
}


def _text_bytes(value: Any) -> Any:
    return value.encode("utf-8") if isinstance(value, str) else value


def _enum_text(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else str(value)


def _record_converter(
    schema: dict[str, Any], named: dict[str, Any], from_json: bool
) -> Converter | None:
    fields = [(f["name"], converter(f["type"], named, from_json)) for f in schema["fields"]]
    if all(convert is None for _, convert in fields):
        return None

    def convert(value: Any) -> Any:
        if value is None:
            return None
        return {
            name: (value.get(name) if fn is None else fn(value.get(name))) for name, fn in fields
        }

    return convert


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float, int),
    "double": (float, int),
    "bytes": (bytes,),
    "fixed": (bytes,),
    "string": (str,),
    "enum": (str,),
    "array": (list,),
    "map": (dict,),
    "record": (dict,),
}


def _union_converter(union: list[Any], named: dict[str, Any], from_json: bool) -> Converter | None:
    branches = _branches(union)
    if len(branches) == 1:
        return converter(branches[0], named, from_json)
    if spark_type(union, named) in ("bigint", "double"):
        return None
    kinds = []
    for branch in branches:
        resolved = resolve(branch, named)
        kind = resolved["type"] if isinstance(resolved, dict) else resolved
        kinds.append((_PYTHON_TYPES.get(kind, (object,)), converter(branch, named, from_json)))

    def convert(value: Any) -> Any:
        if value is None:
            return None
        members: dict[str, Any] = {f"member{i}": None for i in range(len(kinds))}
        for i, (types, fn) in enumerate(kinds):
            if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
                members[f"member{i}"] = value if fn is None else fn(value)
                break
        return members

    return convert


class RecordDecoder:
    """One schema version's payload -> ``{field: value}``, by JSON or Avro."""

    def __init__(self, schema_type: int, data: bytes) -> None:
        definition = parse_definition(data)
        self._json = schema_type == 2
        self._parsed = None if self._json else fastavro.parse_schema(definition)
        named: dict[str, Any] = {}
        self._convert = converter(definition, named, self._json)

    def __call__(self, payload: bytes) -> dict[str, Any]:
        if self._json:
            value = json.loads(payload)
            if not isinstance(value, dict):
                raise ValueError(f"a JSON-schema payload is not an object: {payload[:40]!r}")
        else:
            assert self._parsed is not None
            value = fastavro.schemaless_reader(io.BytesIO(payload), self._parsed, None)
        converted: dict[str, Any] = value if self._convert is None else self._convert(value)
        return converted


def decode_primitive(schema_type: int) -> Callable[[bytes], Any] | None:
    """A primitive schema's payload decoder; None for a type read raw."""
    found = PRIMITIVES.get(schema_type)
    return None if found is None else found[1]
