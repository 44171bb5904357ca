"""Schema registry commands: GET_SCHEMA and the answers to it and to GET_OR_CREATE_SCHEMA."""

from __future__ import annotations

from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.fields import T
from protocol.errors import ServerError
from protocol.framing import encode_command
from protocol.ids import to_u64


def get_schema(topic: str, request_id: int, *, schema_version: bytes | None = None) -> bytes:
    """GET_SCHEMA request (absent ``schema_version`` = latest)."""
    cmd = T(type=T.GET_SCHEMA)
    sub = cmd.getSchema
    sub.request_id = to_u64(request_id)
    sub.topic = topic
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)


def get_schema_response(
    request_id: int,
    *,
    schema: pb.Schema | None = None,
    schema_version: bytes | None = None,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
) -> bytes:
    """GET_SCHEMA_RESPONSE: a schema, or ``error_code`` (e.g. TopicNotFound, no registry)."""
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    sub = cmd.getSchemaResponse
    sub.request_id = to_u64(request_id)
    if error_code is not None:
        sub.error_code = error_code  # type: ignore[assignment]
        sub.error_message = error_message or ""
    if schema is not None:
        sub.schema.CopyFrom(schema)
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)


def get_or_create_schema_response(
    request_id: int,
    *,
    schema_version: bytes | None = None,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE (the C++ 4.2.0 client never asks for it)."""
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    sub = cmd.getOrCreateSchemaResponse
    sub.request_id = to_u64(request_id)
    if error_code is not None:
        sub.error_code = error_code  # type: ignore[assignment]
        sub.error_message = error_message or ""
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)
