"""client/schema/{base,primitive,json_schema,avro,protobuf_native}.py: each schema declares what
the official one declares (type, name, definition text) and writes the payload bytes the
official one writes, and each decodes the other's."""

from __future__ import annotations

import base64
import enum
import json
from types import ModuleType
from typing import Any

import _pulsar
import pulsar.schema as official
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import client.schema
from client.schema import (
    AvroSchema,
    Bytes,
    BytesSchema,
    CustomEnum,
    Float,
    Integer,
    JsonSchema,
    ProtobufNativeSchema,
    Record,
    Schema,
    String,
    StringSchema,
)
from protocol import pb


class Kind(enum.Enum):
    A = 1
    B = 2
    C = 3


def _declare(m: ModuleType) -> tuple[Any, Any]:
    """The same declarations with either package's field types (the same class names, which
    the definitions contain)."""

    class Part(m.Record):  # type: ignore[name-defined,misc]
        _sorted_fields = True
        label = m.String()
        weight = m.Double()

    class Order(m.Record):  # type: ignore[name-defined,misc]
        _avro_namespace = "shop"
        id = m.Long(required=True)
        note = m.String()
        raw = m.Bytes()
        ratio = m.Float()
        kind = Kind
        kind2 = m.CustomEnum(Kind, required=True, default=Kind.B, required_default=True)
        parts = m.Array(Part())
        by_name = m.Map(Part())
        tags = m.Map(m.Array(m.Integer()))
        main = Part()

    return Part, Order


Part, Order = _declare(client.schema)
OfficialPart, OfficialOrder = _declare(official)


ORDER: dict[str, Any] = {
    "id": 7,
    "note": "ünïcode",
    "raw": b"\x00\x01",
    "ratio": 0.5,
    "kind": Kind.C,
    "parts": [{"label": "a", "weight": 1.5}, {"label": "b", "weight": 2.0}],
    "by_name": {"x": {"label": "x", "weight": 3.0}},
    "tags": {"t": [1, 2]},
    "main": {"label": "m"},
}


def _info(schema: Any) -> tuple[int, str, str]:
    info = schema.schema_info()
    return int(info.schema_type()), info.name(), info.schema()


def test_bytes_schema() -> None:
    schema: Schema[bytes] = BytesSchema()
    assert _info(schema) == _info(official.BytesSchema())
    assert schema.to_pb() is None  # BYTES is never declared
    assert schema.encode(b"ab") == b"ab"
    assert schema.encode(bytearray(b"ab")) == b"ab"
    assert schema.decode(b"ab") == b"ab"
    assert str(schema) == str(official.BytesSchema())
    with pytest.raises(TypeError, match="bytes"):
        schema.encode("text")  # type: ignore[arg-type]


def test_string_schema() -> None:
    schema = StringSchema()
    assert _info(schema) == _info(official.StringSchema())
    declared = schema.to_pb()
    assert declared == pb.Schema(name="STRING", schema_data=b"null", type=pb.Schema.String)
    assert schema.encode("héllo") == official.StringSchema().encode("héllo")
    assert schema.decode("héllo".encode()) == "héllo"
    assert str(schema) == str(official.StringSchema())
    with pytest.raises(TypeError, match="str"):
        schema.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="utf-8"):
        schema.decode(b"\xff")


@pytest.mark.parametrize(
    ("ours", "theirs", "wire_type"),
    [
        (JsonSchema, official.JsonSchema, pb.Schema.Json),
        (AvroSchema, official.AvroSchema, pb.Schema.Avro),
    ],
)
def test_record_schemas_declare_as_official(ours: Any, theirs: Any, wire_type: int) -> None:
    mine = ours(Order)
    assert _info(mine) == _info(theirs(OfficialOrder))
    type_, name, text = _info(mine)
    assert type_ == wire_type  # the C++ values are the wire's for declared types
    assert mine.to_pb() == pb.Schema(name=name, schema_data=text.encode(), type=wire_type)  # type: ignore[arg-type]
    assert json.loads(text) == Order.schema()


@pytest.mark.parametrize(
    ("ours", "theirs"), [(JsonSchema, official.JsonSchema), (AvroSchema, official.AvroSchema)]
)
def test_record_schemas_write_official_bytes(ours: Any, theirs: Any) -> None:
    mine, their_schema = ours(Order), theirs(OfficialOrder)
    mine_value, their_value = Order(**ORDER), OfficialOrder(**ORDER)
    payload = mine.encode(mine_value)
    assert payload == their_schema.encode(their_value)
    assert mine.decode(payload) == mine_value
    assert their_schema.decode(payload) == their_value
    decoded = mine.decode(their_schema.encode(their_value))
    assert isinstance(decoded, Order)
    assert decoded.parts[1] == Part(label="b", weight=2.0)
    assert decoded.kind is Kind.C
    assert decoded.kind2 is Kind.B
    assert decoded.raw == b"\x00\x01"


@pytest.mark.parametrize("schema_class", [JsonSchema, AvroSchema])
def test_official_records_work_with_our_schemas(schema_class: Any) -> None:
    # Code half ported: an official Record class given to our schema.
    schema = schema_class(OfficialOrder)
    value = OfficialOrder(**ORDER)
    assert schema.decode(schema.encode(value)) == value


@pytest.mark.parametrize("schema_class", [JsonSchema, AvroSchema])
def test_type_promotion_round_trip(schema_class: Any) -> None:
    class Promoted(Record):
        str_field = String()
        int_field = Integer()
        float_field = Float()
        bytes_field = Bytes()

    sent = Promoted(str_field=b"test", int_field=1, float_field=3, bytes_field="str")
    received = schema_class(Promoted).decode(schema_class(Promoted).encode(sent))
    assert (received.str_field, received.float_field, received.bytes_field) == ("test", 3, b"str")
    assert received == sent


def test_json_schema_specifics() -> None:
    class Inner(Record):
        field = String(required=True)

    class Outer(Record):
        field = Inner()

    encoded = JsonSchema(Outer).encode(Outer(field=Inner(field="something")))
    for reserved in (b"_default", b"_required", b"_required_default"):
        assert reserved not in encoded
    assert json.loads(encoded) == {"field": {"field": "something"}}

    class Labelled(Record):
        color = CustomEnum(enum.Enum("Shade", {"DARK": "dark", "LIGHT": "light"}))

    text_enum = JsonSchema(Labelled)
    value = Labelled(color="LIGHT")
    assert json.loads(text_enum.encode(value)) == {"color": "light"}  # enums by value in JSON
    assert text_enum.decode(text_enum.encode(value)) == value


def test_schema_refusals() -> None:
    class Example(Record):
        a = Integer()

    class Foo(Record):
        x = Integer()

    for schema in (JsonSchema(Example), AvroSchema(Example)):
        with pytest.raises(TypeError):
            schema.encode(Foo(x=1))
        with pytest.raises(TypeError):
            schema.encode("hello")
    with pytest.raises(TypeError, match="schema"):
        JsonSchema(dict)
    with pytest.raises(ValueError, match="JSON object"):
        JsonSchema(Example).decode(b"[1, 2]")
    with pytest.raises(ValueError):  # json.JSONDecodeError is a ValueError
        JsonSchema(Example).decode(b"{not json")
    with pytest.raises(AssertionError):
        AvroSchema(None)
    with pytest.raises(ValueError, match="dict"):
        AvroSchema(None, schema_definition=Example.schema()).encode(Example(a=1))


def test_avro_schema_from_a_definition() -> None:
    definition = {
        "doc": "a company",
        "namespace": "example.avro",
        "type": "record",
        "name": "Company",
        "fields": [
            {"name": "name", "type": ["null", "string"]},
            {
                "name": "employees",
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "Employee",
                            "fields": [
                                {"name": "name", "type": ["null", "string"]},
                                {"name": "age", "type": ["null", "int"]},
                            ],
                        },
                    },
                ],
            },
            {"name": "labels", "type": ["null", {"type": "map", "values": "string"}]},
            {
                "name": "kind",
                "type": ["null", {"type": "enum", "name": "Kind", "symbols": ["small", "big"]}],
            },
        ],
    }
    company = {
        "name": "acme",
        "employees": [{"name": "u1", "age": 25}, {"name": "u2", "age": 30}],
        "labels": {"industry": "software"},
        "kind": "big",
    }
    mine = AvroSchema(None, schema_definition=definition)
    theirs = official.AvroSchema(None, schema_definition=definition)
    assert _info(mine) == _info(theirs)
    assert mine.encode(company) == theirs.encode(company)
    assert mine.decode(mine.encode(company)) == company


def test_custom_schema_subclass_as_written_for_the_official_package() -> None:
    class Upper(Schema[str]):
        def __init__(self) -> None:
            super().__init__(str, _pulsar.SchemaType.STRING, None, "STRING")

        def encode(self, obj: str) -> bytes:
            self._validate_object_type(obj)
            return obj.upper().encode()

        def decode(self, data: bytes) -> str:
            return data.decode()

    schema = Upper()
    assert schema.to_pb() == StringSchema().to_pb()
    assert schema.decode(schema.encode("abc")) == "ABC"
    with pytest.raises(TypeError):
        schema.encode(1)  # type: ignore[arg-type]


# ---------------------------------------------------------------- protobuf native


def _proto_classes() -> tuple[Any, Any]:
    """Two generated classes; the second's file imports the first's."""
    base = descriptor_pb2.FileDescriptorProto(
        name="unit/base.proto", package="unit", syntax="proto3"
    )
    inner = base.message_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    top = descriptor_pb2.FileDescriptorProto(
        name="unit/top.proto", package="unit", syntax="proto3", dependency=["unit/base.proto"]
    )
    outer = top.message_type.add(name="Outer")
    outer.field.add(name="text", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    outer.field.add(
        name="inner",
        number=2,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".unit.Inner",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(base)
    pool.Add(top)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("unit.Inner")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("unit.Outer")),
    )


def test_protobuf_native_schema() -> None:
    inner_class, outer_class = _proto_classes()
    schema = ProtobufNativeSchema(outer_class)
    assert _info(schema) == _info(official.ProtobufNativeSchema(outer_class))
    type_, name, text = _info(schema)
    assert (type_, name) == (20, "PROTOBUF_NATIVE")
    declared = schema.to_pb()
    assert declared is not None
    assert declared.type == pb.Schema.ProtobufNative
    definition = json.loads(text)
    assert list(definition) == [
        "fileDescriptorSet",
        "rootMessageTypeName",
        "rootFileDescriptorName",
    ]
    assert definition["rootMessageTypeName"] == "unit.Outer"
    assert definition["rootFileDescriptorName"] == "unit/top.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(
        base64.b64decode(definition["fileDescriptorSet"])
    )
    assert [f.name for f in files.file] == ["unit/base.proto", "unit/top.proto"]  # imports first

    value = outer_class(text="hi", inner=inner_class(n=2**40))
    payload = schema.encode(value)
    assert payload == value.SerializeToString()
    assert schema.decode(payload) == value
    assert str(schema) == "ProtobufNativeSchema(Outer)"
    with pytest.raises(TypeError):
        schema.encode(inner_class(n=1))
    with pytest.raises(TypeError):
        ProtobufNativeSchema(str)  # type: ignore[type-var]
