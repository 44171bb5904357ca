"""``JsonSchema``: records as JSON objects, declared with the record's Avro definition.

As the official: type ``Json``, name ``"JSON"``, ``schema_data`` the record's ``schema()`` as
``json.dumps(..., indent=True)``; payloads are the record's ``__dict__`` without the field
flags, written with the same ``json.dumps`` settings (enums by value, bytes as text, nested
records as objects), so both clients write identical bytes. Any class with a ``schema()``
classmethod and keyword construction works, the official ``Record`` subclasses included.
"""

from __future__ import annotations

import enum
import json
from typing import Any, TypeVar

from client.schema.base import Schema, SchemaType
from client.schema.record import plain_fields

__all__ = ["JsonSchema"]

R = TypeVar("R")


class JsonSchema(Schema[R]):
    """Records as JSON.

    Args:
        record_cls: a ``Record`` subclass (or a class shaped like one: a ``schema()``
            classmethod giving its definition, fields as keyword arguments).

    Raises:
        TypeError: ``record_cls`` has no ``schema()``.
    """

    def __init__(self, record_cls: type[R]) -> None:
        definition = getattr(record_cls, "schema", None)
        if not callable(definition):
            raise TypeError(
                f"{getattr(record_cls, '__name__', record_cls)} has no schema() classmethod "
                "giving its definition"
            )
        super().__init__(record_cls, SchemaType.JSON, definition(), "JSON")
        self.record_class = record_cls

    def encode(self, obj: R) -> bytes:
        self._validate_object_type(obj)
        return json.dumps(plain_fields(obj), default=_json_value, indent=True).encode("utf-8")

    def decode(self, data: bytes) -> R:
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError(f"a {self.record_class.__name__} is a JSON object, got {data[:40]!r}")
        record: R = self._record_cls(**fields)
        return record

    def __repr__(self) -> str:
        return f"JsonSchema({self.record_class.__name__})"


def _json_value(value: object) -> Any:
    """What ``json`` cannot write itself, as the official converts it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    return plain_fields(value)  # a nested record
