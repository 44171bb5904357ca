"""Avro definitions as Spark columns and payloads decoded into them (pure: no broker)."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import fastavro
import pytest

from spark_connector.option_table import OptionError
from spark_connector.schema_columns import PRIMITIVES, RecordDecoder, record_fields, spark_type

ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
DEFINITION: dict[str, Any] = {
    "type": "record",
    "name": "Everything",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "count", "type": ["null", "int"]},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "blob", "type": "bytes"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 2}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "home", "type": ADDRESS},
        {"name": "work", "type": ["null", "Address"]},
        {"name": "either", "type": ["int", "string"]},
        {"name": "widened", "type": ["int", "long"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}


def test_every_avro_type_has_its_spark_type() -> None:
    assert record_fields(DEFINITION) == [
        ("flag", "boolean"),
        ("count", "int"),
        ("big", "bigint"),
        ("ratio", "float"),
        ("blob", "binary"),
        ("color", "string"),
        ("digest", "binary"),
        ("tags", "array<string>"),
        ("scores", "map<string,double>"),
        ("home", "struct<`city`:string>"),
        ("work", "struct<`city`:string>"),  # a named type used again by its name
        ("either", "struct<member0:int,member1:string>"),
        ("widened", "bigint"),
        ("at", "timestamp"),
        ("price", "decimal(9,2)"),
    ]


def test_a_field_named_like_a_metadata_column_is_refused() -> None:
    clash = {"type": "record", "name": "R", "fields": [{"name": "offset", "type": "long"}]}
    with pytest.raises(OptionError, match=r"'offset'.*decodeSchema=false"):
        record_fields(clash)


def test_a_bare_null_has_no_spark_type() -> None:
    with pytest.raises(OptionError, match="no Spark type"):
        spark_type("null", {})


def test_avro_payload_decodes_with_complex_unions_as_members() -> None:
    row = {
        "flag": True,
        "count": None,
        "big": 1 << 40,
        "ratio": 0.5,
        "blob": b"\x00\x01",
        "color": "BLUE",
        "digest": b"ab",
        "tags": ["x"],
        "scores": {"k": 1.0},
        "home": {"city": "Oslo"},
        "work": None,
        "either": "text",
        "widened": 3,
        "at": 1000,
        "price": b"\x01",
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(DEFINITION), row)
    decoded = RecordDecoder(4, _json(DEFINITION))(buffer.getvalue())
    assert decoded["either"] == {"member0": None, "member1": "text"}
    assert decoded["home"] == {"city": "Oslo"}
    assert decoded["color"] == "BLUE"


def test_json_payload_bytes_are_text_and_enums_values() -> None:
    definition = {
        "type": "record",
        "name": "J",
        "fields": [
            {"name": "blob", "type": ["null", "bytes"]},
            {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["A"]}},
        ],
    }
    decoded = RecordDecoder(2, _json(definition))(b'{"blob": "hi", "color": 1}')
    assert decoded == {"blob": b"hi", "color": "1"}


def test_primitive_payloads_are_pulsars_big_endian_encodings() -> None:
    assert PRIMITIVES[8][1](b"\xff\xff\xff\xfe") == -2
    assert PRIMITIVES[9][1](b"\x00" * 7 + b"\x05") == 5
    assert PRIMITIVES[11][1](b"\x3f\xf0" + b"\x00" * 6) == 1.0
    assert PRIMITIVES[1][1]("é".encode()) == "é"


def _json(definition: dict[str, Any]) -> bytes:
    import json

    return json.dumps(definition).encode()


def test_json_times_are_their_avro_numbers() -> None:
    definition = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    decoded = RecordDecoder(2, _json(definition))(b'{"at": 1500, "day": 2}')
    assert decoded == {
        "at": dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.UTC),
        "day": dt.date(1970, 1, 3),
    }
