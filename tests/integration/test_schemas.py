"""Schemas are kept under the topic's full name (issue #10, item 6).

``my-topic``, ``public/default/my-topic`` and ``persistent://public/default/my-topic`` name one
topic, so PRODUCER, GET_SCHEMA, GET_OR_CREATE_SCHEMA and topic deletion must all reach one schema
whatever spelling each uses. The official client normalizes names itself, so the other spellings
are sent as raw frames.
"""

from __future__ import annotations

import urllib.request
import uuid

import pulsar
import pytest

from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import Frame
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession

pytestmark = [pytest.mark.integration, pytest.mark.compat]
T = pb.BaseCommand.Type


def _spellings() -> list[str]:
    local = f"schema-{uuid.uuid4().hex[:8]}"
    return [local, f"public/default/{local}", f"persistent://public/default/{local}"]


def _json_schema() -> pb.Schema:
    data = b'{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
    return pb.Schema(name="R", schema_data=data, type=pb.Schema.Json)


def _get_or_create_schema(topic: str, request_id: int, schema: pb.Schema) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = request_id
    cmd.getOrCreateSchema.topic = topic
    cmd.getOrCreateSchema.schema.CopyFrom(schema)
    return commands.encode_command(cmd)


def _get_schema(session: RawSession, topic: str, request_id: int) -> Frame:
    reply = session.request(commands.get_schema(topic, request_id), request_id)
    assert reply.type == T.GET_SCHEMA_RESPONSE
    return reply


def test_producer_schema_is_found_under_every_spelling(broker: BrokerThread) -> None:
    short, _, full = spellings = _spellings()
    client = new_client(broker.url)
    try:
        producer = client.create_producer(short, schema=pulsar.schema.StringSchema())
        producer.send("x")
        # The C++ core's own GET_SCHEMA (full name) finds what its PRODUCER declared.
        info = client._client.get_schema_info(full, 0)
        assert info.schema_type() == pulsar.schema.StringSchema().schema_info().schema_type()
    finally:
        close_client(client)
    with RawSession(broker.port) as session:
        for request_id, spelling in enumerate(spellings, start=1):
            reply = _get_schema(session, spelling, request_id).command.getSchemaResponse
            assert not reply.HasField("error_code"), (spelling, reply.error_message)
            assert reply.schema.type == pb.Schema.String
            assert reply.schema_version == (0).to_bytes(8, "big")


def test_get_or_create_keeps_one_version_list_across_spellings(broker: BrokerThread) -> None:
    short, middle, full = _spellings()
    first = _json_schema()
    # A compatible evolution (FULL, the default): a field with a default added.
    data = first.schema_data.replace(b'"int"}', b'"int"},{"name":"b","type":"int","default":0}')
    second = pb.Schema(name="R2", schema_data=data, type=pb.Schema.Json)
    with RawSession(broker.port) as session:
        versions = []
        for request_id, (spelling, schema) in enumerate(
            [(short, first), (middle, second), (full, first)], start=1
        ):
            frame = _get_or_create_schema(spelling, request_id, schema)
            reply = session.request(frame, request_id).command.getOrCreateSchemaResponse
            assert not reply.HasField("error_code"), reply.error_message
            versions.append(int.from_bytes(reply.schema_version, "big"))
        assert versions == [0, 1, 0]
        for request_id, spelling in enumerate((short, middle, full), start=10):
            reply = _get_schema(session, spelling, request_id).command.getSchemaResponse
            assert reply.schema.schema_data == second.schema_data
            assert int.from_bytes(reply.schema_version, "big") == 1


def test_deleting_the_topic_deletes_the_schema_declared_under_a_short_name(
    broker: BrokerThread,
) -> None:
    short, _, full = spellings = _spellings()
    with RawSession(broker.port) as session:
        created = session.request(commands.producer(short, 1, 1, schema=_json_schema()), 1)
        assert created.type == T.PRODUCER_SUCCESS
        session.request(commands.close_producer(1, 2), 2)
        assert not _get_schema(session, short, 3).command.getSchemaResponse.HasField("error_code")

        path = full.removeprefix("persistent://")
        request = urllib.request.Request(
            f"{broker.http}/admin/v2/persistent/{path}", method="DELETE"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 204

        for request_id, spelling in enumerate(spellings, start=10):
            reply = _get_schema(session, spelling, request_id).command.getSchemaResponse
            assert reply.error_code == ServerError.TopicNotFound


def test_invalid_names_get_error_responses_and_the_connection_stays(broker: BrokerThread) -> None:
    with RawSession(broker.port) as session:
        for request_id, topic in enumerate(
            ["persistent://public/default/..", "a/b", "persistent://public/default/x\x00"], start=1
        ):
            reply = _get_schema(session, topic, request_id).command.getSchemaResponse
            assert reply.error_code == ServerError.InvalidTopicName
            frame = _get_or_create_schema(topic, 100 + request_id, _json_schema())
            reply_frame = session.request(frame, 100 + request_id)
            assert reply_frame.type == T.GET_OR_CREATE_SCHEMA_RESPONSE
            assert (
                reply_frame.command.getOrCreateSchemaResponse.error_code
                == ServerError.InvalidTopicName
            )
        # A valid name in a namespace that does not exist stores nothing either.
        frame = _get_or_create_schema("persistent://nope/nope/t", 200, _json_schema())
        reply = session.request(frame, 200).command.getOrCreateSchemaResponse
        assert reply.error_code == ServerError.TopicNotFound
        assert session.is_usable()
    assert not (broker.config.data_path / "metadata" / "schemas").exists()
