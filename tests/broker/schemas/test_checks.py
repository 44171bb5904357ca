"""broker.schemas.checks and strategy: every strategy over a version history, per schema type."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from broker.errors import IncompatibleSchema
from broker.schemas.checks import SchemaData, check_all, check_latest, same_schema
from broker.schemas.strategy import Strategy, effective_strategy, parse_strategy
from protocol import pb

AVRO, JSON, STRING = pb.Schema.Avro, pb.Schema.Json, pb.Schema.String


def avro(*fields: dict[str, Any], kind: int = AVRO) -> SchemaData:
    return SchemaData(kind, json.dumps({"type": "record", "name": "R", "fields": fields}).encode())


A = {"name": "a", "type": "int"}
A_LONG = {"name": "a", "type": "long"}
B_DEFAULT = {"name": "b", "type": "int", "default": 0}
B = {"name": "b", "type": "int"}
V0 = avro(A)  # {a: int}
V1 = avro(A, B_DEFAULT)  # b added with a default: FULL-compatible with V0
V2 = avro(A, B)  # b without default: reads V1's data, not V0's
WIDER = avro(A_LONG)  # reads V0's data; V0 cannot read its data

# (strategy, history, candidate, accepted by the registry's producer path)
CASES = [
    (Strategy.FULL, [V0], V1, True),
    (Strategy.FULL, [V0], WIDER, False),
    (Strategy.BACKWARD, [V0], WIDER, True),
    (Strategy.FORWARD, [V0], WIDER, False),
    (Strategy.FORWARD, [WIDER], V0, True),
    (Strategy.BACKWARD, [WIDER], V0, False),
    (Strategy.BACKWARD, [V0, V1], V2, True),  # only the latest counts
    (Strategy.BACKWARD_TRANSITIVE, [V0, V1], V2, False),  # V2 cannot read V0's data
    (Strategy.FULL, [V0, V1], V2, True),  # V1 and V2 read each other
    (Strategy.FULL_TRANSITIVE, [V0, V1], V2, False),
    (Strategy.FORWARD_TRANSITIVE, [V0, V1], avro(A, B_DEFAULT, B_DEFAULT | {"name": "c"}), True),
    (Strategy.ALWAYS_COMPATIBLE, [V0], avro({"name": "a", "type": "string"}), True),
    (Strategy.ALWAYS_COMPATIBLE, [V0], SchemaData(STRING, b""), True),  # even another type
    (Strategy.ALWAYS_INCOMPATIBLE, [V0], V1, False),
    (Strategy.ALWAYS_INCOMPATIBLE, [V0], avro(A), True),  # the latest itself
    (Strategy.FULL, [V0], SchemaData(STRING, b""), False),  # a change of type
    (Strategy.FULL, [V0], avro(A, kind=JSON), False),  # AVRO -> JSON is a change of type
    (Strategy.FULL, [avro(A, kind=JSON)], avro(A, B_DEFAULT, kind=JSON), True),
    (Strategy.FULL, [avro(A, kind=JSON)], avro(A_LONG, kind=JSON), False),
    (Strategy.FULL, [SchemaData(STRING, b"")], SchemaData(STRING, b"x"), True),
    (Strategy.ALWAYS_INCOMPATIBLE, [SchemaData(STRING, b"")], SchemaData(STRING, b"x"), False),
]


def producer_check(history: list[SchemaData], candidate: SchemaData, strategy: Strategy) -> None:
    check = check_all if strategy.transitive else check_latest
    check(history, candidate, strategy)


@pytest.mark.parametrize(("strategy", "history", "candidate", "accepted"), CASES)
def test_strategies(
    strategy: Strategy, history: list[SchemaData], candidate: SchemaData, accepted: bool
) -> None:
    if accepted:
        producer_check(history, candidate, strategy)
    else:
        with pytest.raises(IncompatibleSchema):
            producer_check(history, candidate, strategy)


def test_refusals_name_the_strategy_and_the_field() -> None:
    with pytest.raises(IncompatibleSchema, match=r"strategy FULL: .*field 'a'"):
        check_latest([V0], WIDER, Strategy.FULL)
    with pytest.raises(IncompatibleSchema, match="exists schema type AVRO, new schema type STRING"):
        check_latest([V0], SchemaData(STRING, b""), Strategy.FULL)


def test_a_json_definition_that_is_not_avro_is_refused_after_an_avro_one() -> None:
    with pytest.raises(IncompatibleSchema, match="Unknown schema format"):
        check_latest([avro(A, kind=JSON)], SchemaData(JSON, b'{"nope": 1}'), Strategy.FULL)
    # An old non-Avro definition is overwritten, as Pulsar lets it be.
    check_latest([SchemaData(JSON, b'{"nope": 1}')], avro(A, kind=JSON), Strategy.FULL)


def test_same_schema_ignores_layout_and_docs() -> None:
    spaced = SchemaData(AVRO, json.dumps(json.loads(V0.data), indent=3).encode())
    documented = avro(A | {"doc": "the a"})
    assert same_schema(V0, spaced)
    assert same_schema(V0, documented)
    assert not same_schema(V0, V1)
    assert not same_schema(V0, SchemaData(JSON, V0.data))


def _native(root: str) -> SchemaData:
    definition = {
        "fileDescriptorSet": "",
        "rootMessageTypeName": root,
        "rootFileDescriptorName": "",
    }
    return SchemaData(pb.Schema.ProtobufNative, json.dumps(definition).encode())


def test_protobuf_native_keeps_its_root_message() -> None:
    check_latest([_native("acme.Order")], _native("acme.Order"), Strategy.FULL)
    with pytest.raises(IncompatibleSchema, match="root message"):
        check_latest([_native("acme.Order")], _native("acme.Invoice"), Strategy.FULL)
    check_latest([_native("acme.Order")], _native("acme.Invoice"), Strategy.ALWAYS_COMPATIBLE)


def _key_value(key: SchemaData, value: SchemaData, key_type: str, value_type: str) -> SchemaData:
    data = struct.pack(">i", len(key.data)) + key.data + struct.pack(">i", len(value.data))
    data += value.data
    properties = {"key.schema.type": key_type, "value.schema.type": value_type}
    return SchemaData(pb.Schema.KeyValue, data, properties)


def test_key_value_checks_each_half_by_its_type() -> None:
    old = _key_value(SchemaData(STRING, b""), V0, "STRING", "AVRO")
    check_latest([old], _key_value(SchemaData(STRING, b""), V1, "STRING", "AVRO"), Strategy.FULL)
    with pytest.raises(IncompatibleSchema, match="field 'a'"):
        check_latest(
            [old], _key_value(SchemaData(STRING, b""), WIDER, "STRING", "AVRO"), Strategy.FULL
        )
    with pytest.raises(IncompatibleSchema, match="different schema type"):
        check_latest([old], _key_value(V0, V0, "AVRO", "AVRO"), Strategy.FULL)


def test_the_effective_strategy() -> None:
    assert effective_strategy(None, None, "FULL") is Strategy.FULL
    assert effective_strategy(None, None, "UNDEFINED") is Strategy.FULL
    assert effective_strategy("FORWARD", "Backward", "FULL") is Strategy.FORWARD
    assert effective_strategy("UNDEFINED", "Backward", "FULL") is Strategy.BACKWARD
    assert effective_strategy(None, "AutoUpdateDisabled", "FULL") is Strategy.ALWAYS_INCOMPATIBLE
    assert effective_strategy(None, None, "BACKWARD_TRANSITIVE") is Strategy.BACKWARD_TRANSITIVE
    with pytest.raises(ValueError, match="unknown schema compatibility strategy"):
        parse_strategy("SIDEWAYS")
