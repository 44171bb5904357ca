"""One schema against a topic's versions, per schema type, as Pulsar's registry checks it.

``check_latest`` and ``check_all`` are ``SchemaRegistryServiceImpl``'s two paths: the latest
version for BACKWARD / FORWARD / FULL, every version for the ``_TRANSITIVE`` strategies. Both
refuse a change of schema type (unless ALWAYS_COMPATIBLE) and then ask the type's checker:

* AVRO and JSON (a JSON schema's definition is an Avro schema): Avro schema resolution in the
  strategy's direction (``avro_compat``); a JSON definition that is not Avro is refused unless
  the stored one is not Avro either (Pulsar then lets it overwrite);
* PROTOBUF_NATIVE: the root message may not change (its full name, in the definition's
  ``rootMessageTypeName``), as Pulsar's ``ProtobufNativeSchemaCompatibilityCheck``;
* KEY_VALUE: key and value schema types must not change; each half is checked by its type;
* every other type (STRING, the primitives, PROTOBUF, NONE): the same type is compatible
  unless the strategy is ALWAYS_INCOMPATIBLE (Pulsar's default check).

``ALWAYS_INCOMPATIBLE`` refuses any schema whose definition differs from the latest one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from broker.errors import IncompatibleSchema
from broker.schemas import avro_compat
from broker.schemas.strategy import Strategy
from protocol import pb

__all__ = ["SchemaData", "check_all", "check_latest", "same_schema", "type_name"]

_SPELLED = {
    "Bool": "BOOLEAN",
    "KeyValue": "KEY_VALUE",
    "LocalDate": "LOCAL_DATE",
    "LocalTime": "LOCAL_TIME",
    "LocalDateTime": "LOCAL_DATE_TIME",
    "ProtobufNative": "PROTOBUF_NATIVE",
}
#: The key or value of a KeyValue schema without a type property is BYTES (Pulsar's default).
_BYTES = -1
#: Pulsar's names for the wire types (its messages and KeyValue properties use them).
_NAMES: dict[int, str] = {
    int(number): _SPELLED.get(name, name.upper()) for name, number in pb.Schema.Type.items()
} | {_BYTES: "BYTES"}
_NUMBERS = {name: number for number, name in _NAMES.items()}
AVRO, JSON = _NUMBERS["AVRO"], _NUMBERS["JSON"]
PROTOBUF_NATIVE, KEY_VALUE = _NUMBERS["PROTOBUF_NATIVE"], _NUMBERS["KEY_VALUE"]


def type_name(schema_type: int) -> str:
    return _NAMES.get(schema_type, str(schema_type))


def _type_of_name(name: str) -> int:
    return _NUMBERS.get(name, _BYTES)


@dataclass(frozen=True)
class SchemaData:
    """What the registry compares of a schema: its type, definition and properties (the
    name is the client's label, as in Pulsar's ``SchemaData``)."""

    type: int
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, schema: pb.Schema) -> SchemaData:
        return cls(
            int(schema.type), schema.schema_data, {p.key: p.value for p in schema.properties}
        )

    @classmethod
    def parse(cls, serialized: bytes) -> SchemaData:
        """A stored version (cached: every new producer compares against all of them, and a
        flood of PRODUCERs with new schemas would otherwise parse them all again, on the loop,
        for each one)."""
        return _parse_stored(serialized)

    @property
    def avro_based(self) -> bool:
        return self.type in (AVRO, JSON)

    @cached_property
    def definition(self) -> object:
        """An Avro-based definition as parsed JSON without ``doc`` (what ``same_schema``
        compares), once per schema; None when it is not Avro-based or not JSON."""
        if not self.avro_based:
            return None
        parsed = _json(self.data)
        return None if parsed is None else _without_docs(parsed)


@lru_cache(maxsize=4096)
def _parse_stored(serialized: bytes) -> SchemaData:
    schema = pb.Schema()
    schema.ParseFromString(serialized)
    return SchemaData.of(schema)


def same_schema(a: SchemaData, b: SchemaData) -> bool:
    """Whether ``b`` is a version ``a`` already is: same type and definition (Avro-based
    definitions compared as parsed JSON, so layout and ``doc`` do not count), as Pulsar's
    ``getSchemaVersionBySchemaData``."""
    if a.type != b.type:
        return False
    if a.data == b.data:
        return True
    left = a.definition
    return left is not None and left == b.definition


def check_latest(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """Refuse ``new`` (IncompatibleSchema) unless compatible with the latest of ``versions``."""
    if strategy is Strategy.ALWAYS_COMPATIBLE or not versions:
        return
    latest = versions[-1]
    if new.type != latest.type:
        raise _type_changed(latest, new)
    if not same_schema(latest, new):
        _checker(new.type)([latest], new, strategy)


def check_all(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """Refuse ``new`` unless compatible with every one of ``versions``."""
    if strategy is Strategy.ALWAYS_COMPATIBLE or not versions:
        return
    other = next((v for v in versions if v.type != new.type), None)
    if other is not None:
        raise _type_changed(other, new)
    _checker(new.type)(versions, new, strategy)


def _type_changed(existing: SchemaData, new: SchemaData) -> IncompatibleSchema:
    return IncompatibleSchema(
        f"Incompatible schema: exists schema type {type_name(existing.type)}, "
        f"new schema type {type_name(new.type)}"
    )


Checker = Callable[[Sequence[SchemaData], SchemaData, Strategy], None]


def _checker(schema_type: int) -> Checker:
    checkers: dict[int, Checker] = {
        AVRO: _check_avro,
        JSON: _check_json,
        PROTOBUF_NATIVE: _check_protobuf_native,
        KEY_VALUE: _check_key_value,
    }
    return checkers.get(schema_type, _check_default)


def _check_default(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _check_avro(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    try:
        existing = [avro_compat.parse(v.data) for v in versions]
        candidate = avro_compat.parse(new.data)
    except (avro_compat.AvroSchemaError, UnicodeDecodeError) as exc:
        raise IncompatibleSchema(f"Schema parse error: {exc}") from None
    if strategy not in _DIRECTIONAL:
        raise IncompatibleSchema(f"Schema compatibility strategy is {strategy}")
    # validateLatest looks at the newest only; check_latest passes just that one.
    for old in reversed(existing):
        reason = None
        if strategy.new_reads_old:
            reason = avro_compat.resolution_error(old, candidate)
            direction = "the new schema cannot read data written with an existing one"
        if reason is None and strategy.old_reads_new:
            reason = avro_compat.resolution_error(candidate, old)
            direction = "an existing schema cannot read data written with the new one"
        if reason is not None:
            raise IncompatibleSchema(
                f"Incompatible schema with strategy {strategy}: {direction}: {reason}"
            )


_DIRECTIONAL = frozenset(
    {
        Strategy.BACKWARD,
        Strategy.FORWARD,
        Strategy.FULL,
        Strategy.BACKWARD_TRANSITIVE,
        Strategy.FORWARD_TRANSITIVE,
        Strategy.FULL_TRANSITIVE,
    }
)


def _check_json(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    if not _is_avro(new.data):
        if all(_is_avro(v.data) for v in versions):
            raise IncompatibleSchema("Unknown schema format: the JSON schema is not an Avro schema")
        return
    # A stored definition that is not Avro (an old or damaged one) is overwritten, as Pulsar.
    avro_versions = [v for v in versions if _is_avro(v.data)]
    if avro_versions:
        _check_avro(avro_versions, new, strategy)


def _is_avro(data: bytes) -> bool:
    try:
        avro_compat.parse(data)
    except (avro_compat.AvroSchemaError, UnicodeDecodeError):
        return False
    return True


def _check_protobuf_native(
    versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy
) -> None:
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy not in _DIRECTIONAL:
        raise IncompatibleSchema(f"Schema compatibility strategy is {strategy}")
    root = _root_message(new)
    for version in versions:
        if _root_message(version) != root:
            raise IncompatibleSchema("Protobuf root message isn't allowed to change")


def _root_message(schema: SchemaData) -> str:
    document = _json(schema.data)
    name = document.get("rootMessageTypeName") if isinstance(document, dict) else None
    if not isinstance(name, str):
        raise IncompatibleSchema("Schema parse error: no rootMessageTypeName in the definition")
    return name


def _check_key_value(versions: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    new_key, new_value = split_key_value(new)
    keys, values = [], []
    for version in versions:
        key, value = split_key_value(version)
        if key.type != new_key.type or value.type != new_value.type:
            raise IncompatibleSchema(
                f"Key schemas or Value schemas are different schema type, from key schema type "
                f"is {type_name(key.type)} and to key schema is {type_name(new_key.type)}, from "
                f"value schema is {type_name(value.type)} and to value schema is "
                f"{type_name(new_value.type)}"
            )
        keys.append(key)
        values.append(value)
    _checker(new_key.type)(keys, new_key, strategy)
    _checker(new_value.type)(values, new_value, strategy)


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema: Pulsar's encoding, two big-endian
    int32-length-prefixed definitions, with types and properties in the schema's properties."""
    data = schema.data
    try:
        (key_length,) = struct.unpack_from(">i", data, 0)
        key = data[4 : 4 + key_length]
        (value_length,) = struct.unpack_from(">i", data, 4 + key_length)
        value = data[8 + key_length : 8 + key_length + value_length]
    except struct.error:
        raise IncompatibleSchema("Schema parse error: not a KeyValue schema definition") from None
    return _half(schema, "key", key), _half(schema, "value", value)


def _half(schema: SchemaData, which: str, data: bytes) -> SchemaData:
    properties = _json(schema.properties.get(f"{which}.schema.properties", "").encode())
    return SchemaData(
        _type_of_name(schema.properties.get(f"{which}.schema.type", "BYTES")),
        data,
        {str(k): str(v) for k, v in properties.items()} if isinstance(properties, dict) else {},
    )


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _without_docs(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_docs(v) for k, v in value.items() if k != "doc"}
    if isinstance(value, list):
        return [_without_docs(v) for v in value]
    return value
