"""Our schemas against the official client through a real broker: our producer to the
official consumer and the reverse, on one topic, with one registered schema version that the
broker's registry gives back (GET_SCHEMA) and recognizes (GET_OR_CREATE_SCHEMA) for both."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pulsar
import pulsar.schema as official
import pytest

import client.schema
from client import Client, InitialPosition
from client.schema import AvroSchema, JsonSchema, ProtobufNativeSchema, StringSchema
from protocol import pb
from protocol.commands.fields import T
from protocol.framing import encode_command
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession

pytestmark = [pytest.mark.integration, pytest.mark.compat]


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


def _declare(m: ModuleType) -> Any:
    """One record type, declared with either package (same names, so same definition)."""

    class Reading(m.Record):  # type: ignore[name-defined,misc]
        _avro_namespace = "sensors"
        sensor = m.String(required=True)
        value = m.Double()
        count = m.Long()
        level = Level
        raw = m.Bytes()
        history = m.Array(m.Integer())
        labels = m.Map(m.String())

    return Reading


Reading = _declare(client.schema)
OfficialReading = _declare(official)
FIELDS: dict[str, Any] = {
    "value": 21.5,
    "count": 2**40,
    "level": Level.HIGH,
    "raw": b"\x00ok",  # JSON writes bytes as UTF-8 text, so they must be UTF-8 (official too)
    "history": [1, 2, 3],
    "labels": {"room": "kitchen"},
}

# kind -> (our schema, the official schema, our value, the official value)
CASES: dict[str, Callable[[], tuple[Any, Any, Any, Any]]] = {
    "avro": lambda: (
        AvroSchema(Reading),
        official.AvroSchema(OfficialReading),
        Reading(sensor="ours", **FIELDS),
        OfficialReading(sensor="official", **FIELDS),
    ),
    "json": lambda: (
        JsonSchema(Reading),
        official.JsonSchema(OfficialReading),
        Reading(sensor="ours", **FIELDS),
        OfficialReading(sensor="official", **FIELDS),
    ),
    "string": lambda: (StringSchema(), official.StringSchema(), "ours ✓", "official ✓"),
    "protobuf_native": lambda: (
        ProtobufNativeSchema(pb.MessageIdData),
        official.ProtobufNativeSchema(pb.MessageIdData),
        pb.MessageIdData(ledgerId=1, entryId=2),
        pb.MessageIdData(ledgerId=3, entryId=4, batch_index=5),
    ),
}


@pytest.fixture
def official_client(running: BrokerThread) -> Iterator[pulsar.Client]:
    official_client = new_client(running.url)
    try:
        yield official_client
    finally:
        close_client(official_client)


def _get_schema(session: RawSession, topic: str, request_id: int) -> pb.CommandGetSchemaResponse:
    cmd = T(type=T.GET_SCHEMA)
    cmd.getSchema.request_id = request_id
    cmd.getSchema.topic = topic
    response: pb.CommandGetSchemaResponse = session.request(
        encode_command(cmd), request_id
    ).command.getSchemaResponse
    assert not response.HasField("error_code"), response.error_message
    return response


def _get_or_create(session: RawSession, topic: str, schema: pb.Schema, request_id: int) -> bytes:
    cmd = T(type=T.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = request_id
    cmd.getOrCreateSchema.topic = topic
    cmd.getOrCreateSchema.schema.CopyFrom(schema)
    response = session.request(encode_command(cmd), request_id).command.getOrCreateSchemaResponse
    assert not response.HasField("error_code"), response.error_message
    version: bytes = response.schema_version
    return version


@pytest.mark.parametrize("kind", list(CASES))
def test_each_client_reads_what_the_other_wrote(
    running: BrokerThread, official_client: pulsar.Client, kind: str
) -> None:
    ours, theirs, our_value, their_value = CASES[kind]()
    topic = f"persistent://public/default/schema-interop-{kind}-{uuid.uuid4().hex[:8]}"
    with Client(running.url) as our_client:
        their_consumer = official_client.subscribe(
            topic, "official", schema=theirs, initial_position=pulsar.InitialPosition.Earliest
        )
        our_consumer = our_client.subscribe(
            topic, "ours", schema=ours, initial_position=InitialPosition.Earliest
        )
        our_producer = our_client.create_producer(topic, schema=ours, producer_name="ours")
        our_producer.send(our_value)
        their_producer = official_client.create_producer(
            topic, schema=theirs, producer_name="official"
        )
        their_producer.send(their_value)

        # The official consumer decodes our message into its own record type, and ours theirs.
        received_by_them = [their_consumer.receive(10_000) for _ in range(2)]
        assert [m.producer_name() for m in received_by_them] == ["ours", "official"]
        assert [m.value() for m in received_by_them] == [our_value, their_value]
        received_by_us = [our_consumer.receive(10_000) for _ in range(2)]
        assert [m.value() for m in received_by_us] == [our_value, their_value]
        if kind in ("avro", "json"):
            assert type(received_by_them[0].value()) is OfficialReading
            assert type(received_by_us[1].value()) is Reading
            assert received_by_us[1].value().level is Level.HIGH
        # One schema on the topic: both producers stamped version 0.
        assert [m.schema_version() for m in received_by_us] == [bytes(8)] * 2
        assert [m.schema_version().encode() for m in received_by_them] == [bytes(8)] * 2

        declared = ours.to_pb()
        assert declared is not None
        with RawSession(running.port) as session:
            latest = _get_schema(session, topic, 1)
            assert latest.schema == declared
            assert latest.schema_version == bytes(8)
            # What we declare is the registered schema, not a new version.
            assert _get_or_create(session, topic, declared, 2) == bytes(8)
            assert _get_schema(session, topic, 3).schema_version == bytes(8)


def test_official_producer_first_then_ours_registers_no_new_version(
    running: BrokerThread, official_client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/schema-order-{uuid.uuid4().hex[:8]}"
    official_client.create_producer(topic, schema=official.AvroSchema(OfficialReading))
    with RawSession(running.port) as session:
        first = _get_schema(session, topic, 1)
        with Client(running.url) as our_client:
            our_client.create_producer(topic, schema=AvroSchema(Reading))
            again = _get_schema(session, topic, 2)
    assert first.schema.type == pb.Schema.Avro
    assert (again.schema, again.schema_version) == (first.schema, first.schema_version)
    assert again.schema == AvroSchema(Reading).to_pb()


def test_custom_avro_definition_with_dict_values(
    running: BrokerThread, official_client: pulsar.Client
) -> None:
    definition = {
        "type": "record",
        "name": "Company",
        "namespace": "example.avro",
        "fields": [
            {"name": "name", "type": ["null", "string"]},
            {"name": "staff", "type": ["null", {"type": "map", "values": "int"}]},
        ],
    }
    topic = f"persistent://public/default/schema-custom-{uuid.uuid4().hex[:8]}"
    companies = [{"name": f"c{i}", "staff": {"a": i}} for i in range(3)]
    theirs = official.AvroSchema(None, schema_definition=definition)
    their_consumer = official_client.subscribe(
        topic, "official", schema=theirs, initial_position=pulsar.InitialPosition.Earliest
    )
    with Client(running.url) as our_client:
        producer = our_client.create_producer(
            topic, schema=AvroSchema(None, schema_definition=definition)
        )
        for company in companies:
            producer.send(company)
    assert [their_consumer.receive(10_000).value() for _ in companies] == companies
