"""client/schema/: official ``Record`` classes given to our schemas (code ported halfway) declare
and write what the official package does, and messages are read across both clients through a
real broker (raw frames on our side). Our own ``Record`` is tested in tests/client/schema/."""

from __future__ import annotations

import enum
import uuid

import pulsar
import pytest
from pulsar.schema import Array, Boolean, Double, Integer, Map, Record, String
from pulsar.schema import JsonSchema as OfficialJsonSchema
from pulsar.schema import StringSchema as OfficialStringSchema

from client.batching import OutgoingMessage, encode_message
from client.schema import BytesSchema, JsonSchema, Schema, StringSchema
from protocol import commands, pb
from protocol.enums import InitialPosition, SubType
from protocol.metadata import decode_entry
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession, T


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(Record):
    street = String()
    number = Integer()


class User(Record):
    name = String(required=True)
    age = Integer()
    score = Double(default=0.5, required_default=True)
    active = Boolean()
    tags = Array(String())
    counts = Map(Integer())
    address = Address()


def _user() -> User:
    return User(
        name="Zoë",
        age=42,
        score=1.25,
        active=True,
        tags=["a", "b"],
        counts={"x": 1},
        address=Address(street="Main", number=7),
    )


def _official_schema(official: pulsar.schema.Schema) -> tuple[str, bytes, int]:
    info = official.schema_info()
    return info.name(), info.schema().encode(), int(info.schema_type())


# --------------------------------------------------------------------------- unit


def test_string_schema() -> None:
    schema = StringSchema()
    assert schema.encode("héllo") == "héllo".encode()
    assert schema.decode("héllo".encode()) == "héllo"
    with pytest.raises(TypeError, match="str"):
        schema.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="utf-8"):
        schema.decode(b"\xff")
    declared = schema.to_pb()
    assert declared is not None
    assert (declared.name, declared.schema_data, declared.type) == (
        *_official_schema(OfficialStringSchema())[:2],
        pb.Schema.String,
    )


def test_bytes_schema_declares_nothing() -> None:
    schema: Schema[bytes] = BytesSchema()
    assert schema.to_pb() is None
    assert schema.encode(bytearray(b"ab")) == b"ab"
    assert schema.decode(b"ab") == b"ab"
    with pytest.raises(TypeError, match="bytes"):
        schema.encode("text")  # type: ignore[arg-type]


def test_json_schema_declares_and_encodes_as_the_official_package() -> None:
    ours, official = JsonSchema(User), OfficialJsonSchema(User)
    declared = ours.to_pb()
    assert declared is not None
    assert (declared.name, declared.schema_data) == _official_schema(official)[:2]
    assert declared.type == pb.Schema.Json
    assert not declared.properties
    user = _user()
    assert ours.encode(user) == official.encode(user)
    assert ours.decode(official.encode(user)) == user
    assert official.decode(ours.encode(user)) == user
    assert ours.decode(ours.encode(User(name="only"))).age is None


def test_json_schema_enum_and_bytes_values_as_the_official_package() -> None:
    class Tagged(Record):
        color = Color
        label = String()

    value = Tagged(color=Color.BLUE, label="x")
    assert JsonSchema(Tagged).encode(value) == OfficialJsonSchema(Tagged).encode(value)
    assert b'"blue"' in JsonSchema(Tagged).encode(value)


def test_json_schema_refusals() -> None:
    with pytest.raises(TypeError, match="schema"):
        JsonSchema(dict)
    schema = JsonSchema(User)
    with pytest.raises(TypeError, match="User"):
        schema.encode(Address(street="s"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON object"):
        schema.decode(b"[1, 2]")
    with pytest.raises(ValueError):  # json.JSONDecodeError is a ValueError
        schema.decode(b"{not json")


def test_to_pb_is_a_copy() -> None:
    schema = StringSchema()
    declared = schema.to_pb()
    assert declared is not None
    declared.name = "changed"
    again = schema.to_pb()
    assert again is not None
    assert again.name == "STRING"


# --------------------------------------------------------------------------- interop


def _latest_schema(session: RawSession, topic: str, request_id: int) -> pb.CommandGetSchemaResponse:
    reply = session.request(commands.get_schema(topic, request_id), request_id)
    assert reply.type == T.GET_SCHEMA_RESPONSE
    response: pb.CommandGetSchemaResponse = reply.command.getSchemaResponse
    assert not response.HasField("error_code"), response.error_message
    return response


@pytest.mark.integration
@pytest.mark.compat
@pytest.mark.parametrize("kind", ["json", "string"])
def test_both_clients_register_one_schema_and_read_each_other(
    broker: BrokerThread, kind: str
) -> None:
    ours: Schema[object]
    if kind == "json":
        ours, official, value = JsonSchema(User), OfficialJsonSchema(User), _user()
    else:
        ours, official, value = StringSchema(), OfficialStringSchema(), "grüße"  # type: ignore[assignment]
    declared = ours.to_pb()
    assert declared is not None
    topic = f"persistent://public/default/schema-{kind}-{uuid.uuid4().hex[:6]}"
    client = new_client(broker.url)
    try:
        official_consumer = client.subscribe(
            topic, "official", schema=official, initial_position=pulsar.InitialPosition.Earliest
        )
        official_producer = client.create_producer(topic, schema=official)
        official_producer.send(value)
        with RawSession(broker.port) as session:
            first = _latest_schema(session, topic, 1)
            created = session.request(
                commands.producer(topic, 1, 2, producer_name="ours", schema=declared), 2
            )
            assert created.type == T.PRODUCER_SUCCESS
            again = _latest_schema(session, topic, 3)
            # Ours is the very schema the official client declared: no new version.
            assert again.schema_version == first.schema_version == bytes(8)
            assert again.schema == first.schema == declared
            entry = encode_message(
                OutgoingMessage(ours.encode(value), 0),
                producer_name="ours",
                publish_time=1,
                schema_version=again.schema_version,
            )
            session.send(entry.send(1))
            assert session.take(lambda f: f.type in (T.SEND_RECEIPT, T.SEND_ERROR)).type == (
                T.SEND_RECEIPT
            )
            subscribe = commands.subscribe(
                topic,
                "ours",
                2,
                4,
                SubType.Exclusive,
                initial_position=InitialPosition.Earliest,
                schema=declared,
            )
            assert session.request(subscribe, 4).type == T.SUCCESS
            session.send(commands.flow(2, 10))
            frames = [session.take(lambda f: f.type == T.MESSAGE) for _ in range(2)]
        # Official producer -> our decode; our producer -> the official consumer's value().
        decoded = []
        for frame in frames:
            assert frame.entry is not None
            metadata, payload = decode_entry(frame.entry)
            decoded.append((metadata.producer_name == "ours", ours.decode(payload)))
            if metadata.producer_name == "ours":
                assert metadata.schema_version == bytes(8)
        assert decoded == [(False, value), (True, value)]
        received = [official_consumer.receive(5000) for _ in range(2)]
        assert [m.value() for m in received] == [value, value]
        assert received[1].producer_name() == "ours"
    finally:
        close_client(client)
