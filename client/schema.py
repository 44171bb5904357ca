"""Schemas: how message values become payload bytes, and what the broker is told about it.

Names and behaviour follow the official ``pulsar.schema`` package so an application can switch
clients by changing an import, and so both clients register *the same* schema on a topic: the
``pb.Schema`` a producer or consumer declares here (type, name, ``schema_data``, properties) is
byte-for-byte what ``pulsar-client`` 3.x declares for the same schema. That matters because a
registry versions schemas by their content; a different spelling would be a new version, or an
incompatible one. Facts copied from the official package (``pulsar/schema/schema.py``):

* bytes: no schema is declared at all (the C++ core sends none for ``BYTES``);
* ``StringSchema``: type ``String``, name ``"STRING"``, ``schema_data`` ``b"null"`` (the Python
  wrapper JSON-encodes its absent definition), UTF-8 payloads;
* ``JsonSchema(record_class)``: type ``Json``, name ``"JSON"``, ``schema_data`` =
  ``json.dumps(record_class.schema(), indent=True)``, the Avro-style record definition that
  ``pulsar.schema.Record`` subclasses produce; payloads are the record's fields as JSON, encoded
  with the same ``json.dumps`` settings, so both clients write identical bytes.

``JsonSchema`` takes any class with a ``schema()`` classmethod returning that definition (the
official ``Record`` subclasses work as they are), built from keyword arguments named after its
fields. Pure: no I/O; instances are immutable and thread-safe.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Generic, TypeVar

from protocol import pb

T = TypeVar("T")

_RESERVED_RECORD_KEYS = ("_default", "_required", "_required_default")
"""Bookkeeping attributes of official ``Record`` instances, never part of the JSON value."""


class Schema(Generic[T]):
    """Base of every schema: ``encode``/``decode`` a value and declare the schema to brokers.

    Subclasses set ``_schema`` (None for bytes, which declares nothing).
    """

    _schema: pb.Schema | None = None

    def encode(self, value: T) -> bytes:
        """The payload bytes of ``value``.

        Raises:
            TypeError: ``value`` is not of the schema's type.
        """
        raise NotImplementedError

    def decode(self, data: bytes) -> T:
        """The value a payload holds.

        Raises:
            ValueError: the bytes are not a valid encoding (e.g. bad UTF-8 or JSON).
        """
        raise NotImplementedError

    def to_pb(self) -> pb.Schema | None:
        """The ``Schema`` a PRODUCER or SUBSCRIBE carries (a fresh copy), None to declare none."""
        if self._schema is None:
            return None
        copy = pb.Schema()
        copy.CopyFrom(self._schema)
        return copy


class BytesSchema(Schema[bytes]):
    """Raw bytes in and out; the default schema, declared to nobody."""

    def encode(self, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"BytesSchema encodes bytes, not {type(value).__name__}")
        return bytes(value)

    def decode(self, data: bytes) -> bytes:
        return data

    def __repr__(self) -> str:
        return "BytesSchema()"


class StringSchema(Schema[str]):
    """UTF-8 text, declared as the official Python client declares it."""

    _schema = pb.Schema(name="STRING", schema_data=b"null", type=pb.Schema.String)

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StringSchema encodes str, not {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")

    def __repr__(self) -> str:
        return "StringSchema()"


class JsonSchema(Schema[T]):
    """Records as JSON objects, with the record's Avro-style definition declared.

    Args:
        record_class: a class with a ``schema()`` classmethod returning the record definition
            (an official ``pulsar.schema.Record`` subclass, or any class shaped like one) and
            accepting its fields as keyword arguments.

    Raises:
        TypeError: ``record_class`` has no ``schema()``.
    """

    def __init__(self, record_class: type[T]) -> None:
        definition = getattr(record_class, "schema", None)
        if not callable(definition):
            raise TypeError(
                f"{record_class.__name__} has no schema() classmethod giving its definition"
            )
        self.record_class = record_class
        # indent=True is what the official package passes (json treats it as indent=1).
        self._schema = pb.Schema(
            name="JSON",
            schema_data=json.dumps(definition(), indent=True).encode("utf-8"),
            type=pb.Schema.Json,
        )

    def encode(self, value: T) -> bytes:
        if not isinstance(value, self.record_class):
            raise TypeError(
                f"JsonSchema of {self.record_class.__name__} cannot encode {type(value).__name__}"
            )
        return json.dumps(_record_fields(value), default=_json_value, indent=True).encode("utf-8")

    def decode(self, data: bytes) -> T:
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError(f"a {self.record_class.__name__} is a JSON object, got {data[:40]!r}")
        return self.record_class(**fields)

    def __repr__(self) -> str:
        return f"JsonSchema({self.record_class.__name__})"


def _record_fields(record: object) -> dict[str, Any]:
    """A record's field values: its attributes without the official ``Record`` bookkeeping."""
    fields = dict(vars(record))
    for key in _RESERVED_RECORD_KEYS:
        fields.pop(key, None)
    return fields


def _json_value(value: object) -> object:
    """What ``json`` cannot encode itself, as the official package converts it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    return _record_fields(value)  # a nested record
