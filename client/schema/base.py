"""``Schema``, the base of every schema, and the ``SchemaInfo`` it declares to brokers.

A schema turns values into payload bytes and back, and tells the broker what the topic holds.
The official ``pulsar.schema.Schema`` keeps a ``SchemaInfo`` (type, name, and the definition
as ``json.dumps(definition, indent=True)`` text); the C++ core puts it in the PRODUCER or
SUBSCRIBE command as ``pb.Schema`` (name, ``schema_data`` = that text, type, no properties),
except for BYTES, which it never declares. Ours builds the same ``pb.Schema``, byte for byte,
because a registry versions schemas by content: a different spelling would be a new schema
version, or an incompatible one. The constructor has the official parameters, so a custom
schema written as a subclass of the official ``Schema`` works here unchanged (its
``_pulsar.SchemaType`` argument converts to ours by value).
"""

from __future__ import annotations

import enum
import json
from typing import Any, Generic, Protocol, TypeVar

from protocol import pb

__all__ = ["Schema", "SchemaInfo", "SchemaType"]

T = TypeVar("T")


class SchemaType(enum.IntEnum):
    """The C++ client's schema types (``_pulsar.SchemaType``), with its values.

    The non-negative ones are ``pb.Schema.Type`` values too; the negative ones exist only in
    clients and are never declared as such.
    """

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    KEY_VALUE = 15
    PROTOBUF_NATIVE = 20
    BYTES = -1
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4


class SchemaInfo:
    """What ``Schema.schema_info()`` returns: the official accessors, as methods."""

    __slots__ = ("_name", "_schema", "_type")

    def __init__(self, schema_type: SchemaType, name: str, schema: str) -> None:
        self._type = schema_type
        self._name = name
        self._schema = schema

    def schema_type(self) -> SchemaType:
        return self._type

    def name(self) -> str:
        return self._name

    def schema(self) -> str:
        """The definition, as JSON text."""
        return self._schema

    def __repr__(self) -> str:
        return f"SchemaInfo({self._type.name}, {self._name!r}, {self._schema[:40]!r})"


class _HasData(Protocol):
    def data(self) -> bytes: ...


class Schema(Generic[T]):
    """Base of every schema: ``encode``/``decode`` a value and declare the schema to brokers.

    Args:
        record_cls: the type of the values (``encode`` checks it).
        schema_type: a ``SchemaType`` (or the official ``_pulsar.SchemaType``, or its int).
        schema_definition: the definition, JSON-ready (None for the types that have none).
        schema_name: the declared name (the official ones: ``"STRING"``, ``"JSON"``, ...).
    """

    def __init__(
        self, record_cls: Any, schema_type: Any, schema_definition: Any, schema_name: str
    ) -> None:
        self._record_cls = record_cls
        # indent=True is what the official passes (json treats it as an indent of 1).
        self._schema_info = SchemaInfo(
            SchemaType(int(schema_type)), schema_name, json.dumps(schema_definition, indent=True)
        )
        self._declared = _declared(self._schema_info)

    def encode(self, obj: T) -> bytes:
        """The payload bytes of ``obj``.

        Raises:
            TypeError: ``obj`` is not of the schema's type.
        """
        raise NotImplementedError

    def decode(self, data: bytes) -> T:
        """The value a payload holds.

        Raises:
            ValueError: the bytes are not a valid encoding (e.g. bad UTF-8 or JSON).
        """
        raise NotImplementedError

    def decode_message(self, msg: _HasData) -> T:
        """The value of a received message (its ``data()`` decoded)."""
        return self.decode(msg.data())

    def schema_info(self) -> SchemaInfo:
        return self._schema_info

    def to_pb(self) -> pb.Schema | None:
        """The ``Schema`` a PRODUCER or SUBSCRIBE carries (a fresh copy), None to declare none."""
        if self._declared is None:
            return None
        copy = pb.Schema()
        copy.CopyFrom(self._declared)
        return copy

    def _validate_object_type(self, obj: object) -> None:
        if not isinstance(obj, self._record_cls):
            raise TypeError(
                f"Invalid record obj of type {type(obj)} - expected type is {self._record_cls}"
            )


def _declared(info: SchemaInfo) -> pb.Schema | None:
    """The wire form of ``info``: none for bytes and the client-only types."""
    if info.schema_type() < 0:
        return None
    return pb.Schema(
        name=info.name(),
        schema_data=info.schema().encode("utf-8"),
        type=int(info.schema_type()),  # type: ignore[arg-type]
    )
