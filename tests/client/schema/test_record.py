"""client/schema/record.py and fields.py: ``Record`` and its field types mean what the official
``pulsar.schema`` ones mean: the same definitions (compared with the official package, key
order included, on the same declarations), the same checks and conversions, the same
defaults, equality and text."""

from __future__ import annotations

import enum
import json
from types import ModuleType
from typing import Any

import fastavro
import pulsar.schema as official
import pytest

import client.schema as ours
from client.schema import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)


class Color(enum.Enum):
    red = 1
    green = 2
    blue = 3


class OtherColor(enum.Enum):
    red = 1


# ---------------------------------------------------------------- same definitions as official


def _every_type(m: ModuleType) -> type:
    class Example(m.Record):  # type: ignore[name-defined,misc]
        _sorted_fields = True
        j = m.CustomEnum(Color)
        a = m.String()
        b = m.Integer()
        c = m.Array(m.String())
        d = Color
        e = m.Boolean()
        f = m.Float()
        g = m.Double()
        h = m.Bytes()
        i = m.Map(m.String())
        k = m.Long(required=True)
        n = m.Null()

    return Example


def _nested(m: ModuleType) -> type:
    class Inner(m.Record):  # type: ignore[name-defined,misc]
        _avro_namespace = "inner.ns"
        x = m.Integer(required=True)
        color = m.CustomEnum(Color)

    class Outer(m.Record):  # type: ignore[name-defined,misc]
        _avro_namespace = "outer"
        by_class = Inner
        by_instance = Inner()
        required_one = Inner(required=True)
        in_array = m.Array(Inner())
        in_map = m.Map(Inner())

    return Outer


def _required_defaults(m: ModuleType) -> type:
    class Sub(m.Record):  # type: ignore[name-defined,misc]
        y = m.Long()

    class Defaults(m.Record):  # type: ignore[name-defined,misc]
        a = m.Integer(required_default=True)
        b = m.Boolean(required=True, required_default=True)
        c = m.Double(default=6.5, required_default=True)
        d = m.String(default="hi", required=True, required_default=True)
        e = m.CustomEnum(Color, required=True, default=Color.green, required_default=True)
        f = m.Array(m.Integer(), required_default=True)
        g = m.Map(m.Bytes(), required_default=True)
        h = Sub(required_default=True)

    return Defaults


def _map_array(m: ModuleType) -> type:
    class Containers(m.Record):  # type: ignore[name-defined,misc]
        map_of_arrays = m.Map(m.Array(m.Integer()))
        array_of_maps = m.Array(m.Map(m.Integer()))
        array_of_arrays = m.Array(m.Array(m.Integer()))
        map_of_maps = m.Map(m.Map(m.Integer()))

    return Containers


@pytest.mark.parametrize("declare", [_every_type, _nested, _required_defaults, _map_array])
def test_definition_is_the_official_one(declare: Any) -> None:
    mine, theirs = declare(ours).schema(), declare(official).schema()
    assert mine == theirs
    # The registry compares the JSON text: the key order must agree too.
    assert json.dumps(mine, indent=True) == json.dumps(theirs, indent=True)
    fastavro.parse_schema(mine)  # and it is valid Avro


def test_definition_shape() -> None:
    definition = _nested(ours).schema()
    assert [f["name"] for f in definition["fields"]] == [
        "by_class",
        "by_instance",
        "required_one",
        "in_array",
        "in_map",
    ]
    first = definition["fields"][0]["type"]
    assert first[0] == "null"
    assert first[1]["namespace"] == "inner.ns"
    assert first[1]["fields"][0] == {"name": "x", "type": "int"}  # required: no null union
    # Records and enums are written once, then named (with the namespace if any).
    assert definition["fields"][1] == {"name": "by_instance", "type": ["null", "inner.ns.Inner"]}
    assert definition["fields"][2] == {"name": "required_one", "type": "inner.ns.Inner"}
    assert definition["fields"][3]["type"][1] == {"type": "array", "items": "inner.ns.Inner"}
    defaults = _required_defaults(ours).schema()["fields"]
    assert defaults[4] == {
        "name": "e",
        "default": "green",  # an enum default by its symbol
        "type": {"type": "enum", "name": "Color", "symbols": ["red", "green", "blue"]},
    }
    assert defaults[2] == {"name": "c", "default": 6.5, "type": ["null", "double"]}


def test_sorted_and_declaration_order() -> None:
    class Declared(Record):
        b = Integer()
        a = Integer()

    class Sorted(Record):
        _sorted_fields = True
        b = Integer()
        a = Integer()

    assert [f["name"] for f in Declared.schema()["fields"]] == ["b", "a"]
    assert [f["name"] for f in Sorted.schema()["fields"]] == ["a", "b"]


def test_attributes_that_are_not_fields_are_ignored() -> None:
    class NotAnEnum:
        red = 1

    class Odd(Record):
        a = Integer()
        b = NotAnEnum
        c = 5

        def method(self) -> int:
            return 1

    assert Odd.schema() == {
        "type": "record",
        "name": "Odd",
        "fields": [{"name": "a", "type": ["null", "int"]}],
    }


# ---------------------------------------------------------------- values


def test_initialization_and_assignment() -> None:
    class Example(Record):
        a = Integer()
        b = Integer()

    r = Example(a=1, b=2)
    assert (r.a, r.b) == (1, 2)
    r.b = 5
    assert r.b == 5
    with pytest.raises(AttributeError, match="undeclared field c"):
        r.c = 3
    assert Example(a=1, unknown=9) == Example(a=1)  # names that are not fields are ignored


def test_defaults_of_unset_fields() -> None:
    class Sub(Record):
        s = Integer()

    class Example(Record):
        a = Null()
        b = Boolean()
        c = Integer()
        d = Long()
        e = Float()
        f = Double()
        g = Bytes()
        h = String()
        i = Integer(default=5)
        j = String(default="hello")
        k = Boolean(default=True, required=True)
        sub = Sub()

    r = Example()
    assert r.a is None
    assert r.b is False
    assert (r.c, r.d, r.e, r.f, r.g, r.h) == (None,) * 6
    assert (r.i, r.j, r.k) == (5, "hello", True)
    assert r.sub == Sub()  # an unset sub-record is the declaration's (empty) record
    r.i = None
    assert r.i == 5  # None means the default for a field that is not required


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        (Integer(), [1, -(2**31)], [1.5, "1"]),
        (Long(), [1234], [1.12]),
        (Boolean(), [False], [1]),
        (Float(), [1.0, 1], ["x"]),
        (Double(), [1.0, 1], [b"1"]),
        (String(), ["hello"], [2]),
        (Bytes(), [b"x"], [2]),
        (Null(), [None], [1]),
        (Array(String()), [["a", "b"], []], [1, [1, 2], ["1", 3]]),
        (Map(Integer()), [{"a": 1}], [1, {"a": "1"}, {1: 1}]),
    ],
)
def test_field_type_checks(field: Any, good: list[Any], bad: list[Any]) -> None:
    for value in good:
        assert field.validate_type("f", value) == value
    for value in bad:
        with pytest.raises(TypeError):
            field.validate_type("f", value)


def test_type_promotions() -> None:
    assert Double().validate_type("f", 20) == 20.0
    assert Bytes().validate_type("f", "text") == b"text"
    assert String().validate_type("f", b"text") == "text"
    assert Integer().validate_type("f", 20) == 20


def test_required_field_refuses_none() -> None:
    with pytest.raises(TypeError):
        String(required=True).validate_type("f", None)
    with pytest.raises(TypeError):
        Integer(required=True).validate_type("f", None)


def test_defaults_are_checked_when_declared() -> None:
    with pytest.raises(TypeError):
        Integer(default="xyz")
    with pytest.raises(TypeError):
        CustomEnum(int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a Record or a Field"):
        Array(str)


def test_enum_values_by_member_name_or_value() -> None:
    class Painted(Record):
        a = Color
        b = CustomEnum(Color)

    assert Painted(a=Color.red).a is Color.red
    assert Painted(a="red").a is Color.red
    assert Painted(a=1).a is Color.red
    assert Painted(b=3).b is Color.blue
    for wrong in ("redx", OtherColor.red, 5, 1.0):
        with pytest.raises(TypeError):
            Painted(a=wrong)


def test_sub_record_checks() -> None:
    class One(Record):
        s = Integer()

    class Two(Record):
        s = String()

    class Holder(Record):
        a = One

    assert Holder(a=One(s=1)).a.s == 1
    assert Holder(a={"s": 2}).a == One(s=2)  # a dict of the sub-record's fields
    for wrong in (1, Two(s="x")):
        with pytest.raises(TypeError):
            Holder(a=wrong)


def test_records_in_containers_from_dicts() -> None:
    class Item(Record):
        n = Integer()

    class Holder(Record):
        items = Array(Item())
        by_key = Map(Item)

    holder = Holder(items=[{"n": 1}, {"n": 2}], by_key={"k": {"n": 3}})
    assert holder.items == [Item(n=1), Item(n=2)]
    assert holder.by_key == {"k": Item(n=3)}
    with pytest.raises(TypeError):
        Holder(items=[Item(n=1), 5])


def test_array_error_message() -> None:
    class Listed(Record):
        some_field = Array(Integer(), required=False, default=[])

    with pytest.raises(TypeError) as raised:
        Listed(some_field=["not", "integer"])
    assert str(raised.value) == "Array field some_field items should all be of type int"


def test_equality_and_text() -> None:
    class Example(Record):
        a = Integer()
        b = String()

    assert Example(a=1, b="x") == Example(a=1, b="x")
    assert Example(a=1, b="x") != Example(a=2, b="x")
    assert Example(a=1) != object()
    # The text is the instance's dict, flags first, as the official record prints.
    assert str(Example(a=1, b="x")) == (
        "{'_required_default': False, '_default': None, '_required': False, 'a': 1, 'b': 'x'}"
    )
    assert Example(a=1).type() == "Example"
    assert Example(a=1).python_type() is Example


def test_same_text_and_equality_as_official() -> None:
    mine, theirs = _every_type(ours), _every_type(official)
    values = {"a": "s", "b": 1, "c": ["x"], "d": Color.blue, "h": b"b", "i": {"k": "v"}, "k": 7}
    assert str(mine(**values)) == str(theirs(**values))
    assert mine(**values) == theirs(**values)
