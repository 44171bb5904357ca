"""``BytesSchema`` and ``StringSchema``, as the official package declares and encodes them.

Bytes are the default and are declared to nobody (the C++ core sends no schema for BYTES);
strings are UTF-8 and declared as type ``String``, name ``"STRING"``, ``schema_data``
``b"null"`` (the official wrapper JSON-encodes its absent definition).
"""

from __future__ import annotations

from client.schema.base import Schema, SchemaType

__all__ = ["BytesSchema", "StringSchema"]


class BytesSchema(Schema[bytes]):
    """Raw bytes in and out; the default schema, declared to nobody."""

    def __init__(self) -> None:
        super().__init__(bytes, SchemaType.BYTES, None, "BYTES")

    def encode(self, obj: bytes) -> bytes:
        # bytearray and memoryview too (the official takes bytes only): they are bytes to send.
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise TypeError(f"BytesSchema encodes bytes, not {type(obj).__name__}")
        return bytes(obj)

    def decode(self, data: bytes) -> bytes:
        return data

    def __str__(self) -> str:
        return "BytesSchema"

    def __repr__(self) -> str:
        return "BytesSchema()"


class StringSchema(Schema[str]):
    """UTF-8 text."""

    def __init__(self) -> None:
        super().__init__(str, SchemaType.STRING, None, "STRING")

    def encode(self, obj: str) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"StringSchema encodes str, not {type(obj).__name__}")
        return obj.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")

    def __str__(self) -> str:
        return "StringSchema"

    def __repr__(self) -> str:
        return "StringSchema()"
