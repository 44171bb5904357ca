"""Schemas: how message values become payload bytes, and what the broker is told about them.

Every public name of the official ``pulsar.schema`` package, with its meaning, so an
application switches clients by changing an import, and so both clients register *the same*
schema on a topic (see ``base.py``): the record types (``Record`` and its field types,
``record.py`` and ``fields.py``) and the schemas (``BytesSchema``, ``StringSchema``,
``JsonSchema``, ``AvroSchema``, ``ProtobufNativeSchema``). Pure: no I/O.
"""

from client.schema.avro import AvroSchema
from client.schema.base import Schema, SchemaInfo, SchemaType
from client.schema.fields import (
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Null,
    String,
)
from client.schema.json_schema import JsonSchema
from client.schema.primitive import BytesSchema, StringSchema
from client.schema.protobuf_native import ProtobufNativeSchema
from client.schema.record import Array, Map, Record

__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "JsonSchema",
    "Long",
    "Map",
    "Null",
    "ProtobufNativeSchema",
    "Record",
    "Schema",
    "SchemaInfo",
    "SchemaType",
    "String",
    "StringSchema",
]
