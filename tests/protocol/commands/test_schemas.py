"""Builders of protocol.commands.schemas: each one round-trips with the right fields."""

from __future__ import annotations

from protocol import commands, pb
from protocol.errors import ServerError
from tests.protocol.commands.frames import T, sub


def test_get_schema_and_response() -> None:
    request = sub(commands.get_schema("t", 5, schema_version=b"\x00" * 8), T.GET_SCHEMA)
    assert (request.topic, request.request_id, request.schema_version) == ("t", 5, b"\x00" * 8)
    missing = sub(
        commands.get_schema_response(
            5, error_code=ServerError.TopicNotFound, error_message="no schema"
        ),
        T.GET_SCHEMA_RESPONSE,
    )
    assert missing.error_code == ServerError.TopicNotFound
    assert missing.error_message == "no schema"
    schema = pb.Schema(name="s", schema_data=b"x", type=pb.Schema.String)
    found = sub(
        commands.get_schema_response(5, schema=schema, schema_version=b"\x01"),
        T.GET_SCHEMA_RESPONSE,
    )
    assert found.schema == schema
    assert not found.HasField("error_code")


def test_get_or_create_schema_response() -> None:
    response = sub(
        commands.get_or_create_schema_response(2, schema_version=b"\x07"),
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
    )
    assert response.schema_version == b"\x07"
