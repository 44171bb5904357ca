"""``AvroSchema``: records (or plain dicts) as schemaless Avro binary, through fastavro.

As the official: type ``Avro``, name ``"AVRO"``, ``schema_data`` the definition as
``json.dumps(..., indent=True)``; the definition is the record class's ``schema()`` or, with
``record_cls=None``, the ``schema_definition`` given (a dict, e.g. from
``fastavro.schema.load_schema``), and then values are plain dicts. Payloads are fastavro's
schemaless encoding (no header, no writer schema), which is what the official writes and
Java's ``AvroSchema`` reads: enums by symbol name, nested records as their fields.

Decoding uses this schema's own definition as the writer's. The official client can instead
fetch the writer's schema version from the broker (``attach_client``); ours has no such lookup
yet, so a consumer must be given the schema its producers wrote.
"""

from __future__ import annotations

import enum
import io
from typing import Any, TypeVar

import fastavro

from client.schema.base import Schema, SchemaType
from client.schema.record import Record, plain_fields

__all__ = ["AvroSchema"]

R = TypeVar("R")


class AvroSchema(Schema[R]):
    """Records as Avro binary.

    Args:
        record_cls: a ``Record`` subclass (or a class shaped like one), or None to use
            ``schema_definition`` with dict values.
        schema_definition: the Avro definition when ``record_cls`` is None.

    Raises:
        AssertionError: both are None (the official exception).
        fastavro.schema.SchemaParseException: the definition is not valid Avro.
    """

    def __init__(self, record_cls: type[R] | None, schema_definition: Any = None) -> None:
        if record_cls is None and schema_definition is None:
            raise AssertionError(
                "The param record_cls and schema_definition shouldn't be both None."
            )
        definition = record_cls.schema() if record_cls is not None else schema_definition  # type: ignore[attr-defined]
        super().__init__(record_cls, SchemaType.AVRO, definition, "AVRO")
        self._definition = definition
        # Parsed once: fastavro would otherwise parse the definition on every message.
        self._parsed = fastavro.parse_schema(definition)

    def encode(self, obj: R) -> bytes:
        """Raises: TypeError (not the record class), ValueError (not a dict, without a record
        class; or a value that does not fit the definition)."""
        if self._record_cls is not None:
            self._validate_object_type(obj)
            value = _avro_value(obj)
        elif isinstance(obj, dict):
            value = _avro_value(obj)
        else:
            raise ValueError("If using the custom schema, the record data should be dict type.")
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self._parsed, value)
        return buffer.getvalue()

    def decode(self, data: bytes) -> R:
        """Raises: ValueError or EOFError (bytes that are not this schema's encoding)."""
        fields = fastavro.schemaless_reader(io.BytesIO(data), self._parsed, None)
        if self._record_cls is None:
            return fields  # type: ignore[return-value]
        record: R = self._record_cls(**fields)  # type: ignore[arg-type]
        return record

    def __repr__(self) -> str:
        name = getattr(self._record_cls, "__name__", None) or self._definition.get("name")
        return f"AvroSchema({name})"


def _avro_value(value: Any) -> Any:
    """``value`` as fastavro writes it: enums by symbol, records and maps as dicts."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {key: _avro_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_avro_value(item) for item in value]
    if isinstance(value, Record) or _record_like(value):
        return {key: _avro_value(item) for key, item in plain_fields(value).items()}
    return value


def _record_like(value: object) -> bool:
    """An official ``Record`` (or any class with a ``schema()`` and attributes)."""
    return callable(getattr(type(value), "schema", None)) and hasattr(value, "__dict__")
