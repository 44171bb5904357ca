"""broker.schemas.avro_compat: Avro schema resolution, pair by pair, and checked against real
reads: whenever the check says a reader reads a writer, fastavro reads data written with it."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from fastavro.utils import generate_many
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.schemas.avro_compat import AvroSchemaError, parse, resolution_error


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def reads(writer: Any, reader: Any) -> bool:
    """Whether ``reader`` reads ``writer``'s data (both given as decoded JSON)."""
    return resolution_error(parse(json.dumps(writer)), parse(json.dumps(reader))) is None


ENUM_AB = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
ENUM_ABC = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}

# (writer, reader, readable): the specification's rules one by one.
PAIRS = [
    # primitives and promotions
    ("int", "int", True),
    ("int", "long", True),
    ("int", "float", True),
    ("int", "double", True),
    ("long", "int", False),
    ("long", "double", True),
    ("float", "double", True),
    ("double", "float", False),
    ("string", "bytes", True),
    ("bytes", "string", True),
    ("string", "int", False),
    ("boolean", "int", False),
    ("null", "null", True),
    # unions
    (["null", "int"], ["null", "int"], True),
    (["null", "int"], ["null", "string"], False),
    ("int", ["null", "int"], True),
    ("int", ["null", "long"], True),  # promoted into a branch
    ("int", ["null", "string"], False),
    (["null", "int"], "int", False),  # the null branch has nowhere to go
    (["int", "long"], "long", True),
    (["int", "long"], ["double"], True),
    # records
    (record(f("a", "int")), record(f("a", "int")), True),
    (record(f("a", "int")), record(f("a", "long")), True),
    (record(f("a", "long")), record(f("a", "int")), False),
    (record(f("a", "int"), f("b", "int")), record(f("a", "int")), True),  # writer extra: skipped
    (record(f("a", "int")), record(f("a", "int"), f("b", "int")), False),  # no default
    (record(f("a", "int")), record(f("a", "int"), f("b", "int", default=0)), True),
    (record(f("a", "int")), record(f("a", "int"), f("b", ["null", "int"], default=None)), True),
    (record(f("a", "int")), record(f("b", "int", aliases=["a"])), True),  # reader alias
    (record(f("a", "int"), name="Old"), record(f("a", "int"), name="New"), True),  # as Avro Java
    (
        record(f("n", record(f("x", "int"), name="In"))),
        record(f("n", record(f("x", "string"), name="In"))),
        False,
    ),
    # enums
    (ENUM_AB, ENUM_ABC, True),
    (ENUM_ABC, ENUM_AB, False),
    (ENUM_ABC, {**ENUM_AB, "default": "A"}, True),
    (ENUM_AB, {**ENUM_AB, "name": "F"}, False),
    (ENUM_AB, {**ENUM_AB, "name": "F", "aliases": ["E"]}, True),
    # fixed
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4}, True),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "G", "size": 4}, False),
    # arrays and maps
    ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, False),
    ({"type": "map", "values": "string"}, {"type": "map", "values": "bytes"}, True),
    ({"type": "map", "values": "string"}, {"type": "array", "items": "string"}, False),
    # named records inside unions: by full name first
    (
        record(f("v", ["null", record(f("x", "int"), name="A")])),
        record(
            f(
                "v",
                [
                    "null",
                    record(f("y", "int", default=1), name="B"),
                    record(f("x", "long"), name="A"),
                ],
            )
        ),
        True,
    ),
]


@pytest.mark.parametrize(("writer", "reader", "readable"), PAIRS)
def test_resolution_follows_the_specification(writer: Any, reader: Any, readable: bool) -> None:
    assert reads(writer, reader) is readable


def test_a_refusal_says_where_and_why() -> None:
    error = resolution_error(
        parse(record(f("a", ["null", "int"]))), parse(record(f("a", ["null", "string"])))
    )
    assert error == "field 'a': int matches no branch of the reader's union"
    missing = resolution_error(parse(record(f("a", "int"))), parse(record(f("b", "int"))))
    assert missing == "field 'b' is missing from the writer and has no default"


def test_recursive_and_referenced_types_resolve() -> None:
    linked = record(f("v", "int"), f("next", ["null", "Node"]), name="Node")
    widened = record(f("v", "long"), f("next", ["null", "Node"]), name="Node")
    assert reads(linked, widened)
    assert not reads(widened, linked)
    namespaced = {
        "type": "record",
        "name": "Outer",
        "namespace": "acme",
        "fields": [f("a", ENUM_AB), f("b", "acme.E"), f("c", "E")],
    }
    assert reads(namespaced, namespaced)


@pytest.mark.parametrize(
    "bad",
    [
        '{"type": "record", "name": "R"}',
        '{"type": "nope"}',
        "not json",
        '{"type": "fixed"}',
        json.dumps(record(f("a", ENUM_AB), f("b", ENUM_ABC))),  # E defined twice
    ],
)
def test_what_is_not_an_avro_schema_is_refused(bad: str) -> None:
    with pytest.raises(AvroSchemaError):
        parse(bad)


# ---------------------------------------------------------------------------- against real reads

# One record name, so fastavro (which also compares record names) judges only the fields.
FIELD_TYPES = st.sampled_from(
    [
        "int",
        "long",
        "float",
        "double",
        "string",
        "bytes",
        "boolean",
        ["null", "int"],
        ["null", "string"],
        ["null", "long"],
        ["int", "string"],
        {"type": "array", "items": "int"},
        {"type": "array", "items": "long"},
        {"type": "map", "values": "string"},
        ENUM_AB,
        ENUM_ABC,
    ]
)
FIELDS = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.tuples(FIELD_TYPES, st.booleans()),  # (type, has a default)
    max_size=3,
)


def _schema(fields: dict[str, tuple[Any, bool]]) -> dict[str, Any]:
    out = []
    for name, (type_, has_default) in sorted(fields.items()):
        if isinstance(type_, dict) and type_["type"] == "enum":
            type_ = {**type_, "name": f"E_{name}"}  # one definition per name, as Avro wants
        field = f(name, type_)
        if has_default:
            field["default"] = _default_of(type_)
        out.append(field)
    return record(*out)


def _default_of(type_: Any) -> Any:
    first = type_[0] if isinstance(type_, list) else type_
    if isinstance(first, dict):
        return {"array": [], "map": {}, "enum": "A"}[first["type"]]
    return {
        "null": None,
        "int": 0,
        "long": 0,
        "float": 0.0,
        "double": 0.0,
        "string": "",
        "bytes": "",
        "boolean": False,
    }[first]


@settings(max_examples=300, deadline=None)
@given(FIELDS, FIELDS)
def test_whatever_the_check_accepts_fastavro_reads(
    writer_fields: dict[str, tuple[Any, bool]], reader_fields: dict[str, tuple[Any, bool]]
) -> None:
    writer, reader = _schema(writer_fields), _schema(reader_fields)
    assert reads(writer, writer)  # every schema reads itself
    if not reads(writer, reader):
        return
    parsed_writer, parsed_reader = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    for datum in generate_many(parsed_writer, 5):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed_writer, datum)
        buffer.seek(0)
        try:
            fastavro.schemaless_reader(buffer, parsed_writer, parsed_reader)
        except UnicodeDecodeError:
            # bytes -> string is a promotion of the specification for bytes that hold UTF-8;
            # random bytes need not. Anything else failing would be a wrong "compatible".
            assert "bytes" in json.dumps(writer)
