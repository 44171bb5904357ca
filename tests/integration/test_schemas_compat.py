"""Schema compatibility (issues #23/#24): a topic's schema versions are judged by its
namespace's strategy, as Pulsar judges them, for the official client and ours.

Each test gets a fresh broker, so ``public/default`` starts with no schema policy: the broker's
``schemaCompatibilityStrategy`` (FULL) applies until a test sets one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest
from click.testing import CliRunner
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

import client as ours
import client.schema as our_schema
from broker.admin_cli import main as admin_main
from broker.schemas.registry import SchemaRegistry
from broker.schemas.strategy import Strategy
from protocol import commands, pb
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession

pytestmark = [pytest.mark.integration, pytest.mark.compat]
NAMESPACE = "/admin/v2/namespaces/public/default"


class Point(Record):
    x = Integer()
    y = Integer()


class TextPoint(Record):  # x changed from int to string: neither reads the other
    x = String()
    y = Integer()


class Person(Record):
    name = String()
    age = Integer()


class PersonStrictAge(Record):  # age no longer nullable: FORWARD-compatible only
    _sorted_fields = True
    name = String()
    age = Integer(required=True)


class PointWithZ(Record):  # a field with a default added: FULL-compatible
    _avro_name = "Point"
    x = Integer()
    y = Integer()
    z = Integer(default=None, required_default=True)


class PointZWithoutDefault(Record):
    _avro_name = "Point"
    x = Integer()
    y = Integer()
    z = Integer()


def _topic() -> str:
    return f"persistent://public/default/compat-{uuid.uuid4().hex[:8]}"


def _admin(broker: BrokerThread, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.http}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read()
            return reply.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _set_strategy(broker: BrokerThread, strategy: str) -> None:
    assert _admin(broker, "PUT", f"{NAMESPACE}/schemaCompatibilityStrategy", strategy)[0] == 204


def _stored_versions(broker: BrokerThread, topic: str) -> list[bytes]:
    """The schema definitions of the topic's versions, oldest first (GET_SCHEMA by version)."""
    found = []
    with RawSession(broker.port) as session:
        for version in range(100):
            request = commands.get_schema(
                topic, version + 1, schema_version=version.to_bytes(8, "big")
            )
            reply = session.request(request, version + 1).command.getSchemaResponse
            if reply.HasField("error_code"):
                return found
            found.append(reply.schema.schema_data)
    return found


def test_an_incompatible_consumer_is_refused_and_the_right_one_then_subscribes(
    broker: BrokerThread,
) -> None:
    topic = _topic()
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic, schema=JsonSchema(Point))
        for wrong in (JsonSchema(TextPoint), AvroSchema(Point), StringSchema()):
            with pytest.raises(pulsar.IncompatibleSchema):
                client.subscribe(topic, "sub", schema=wrong)
        # The refusals left nothing behind: the exclusive subscription is free for the right one.
        consumer = client.subscribe(topic, "sub", schema=JsonSchema(Point))
        producer.send(Point(x=1, y=2))
        assert consumer.receive(timeout_millis=10_000).value() == Point(x=1, y=2)
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=JsonSchema(TextPoint))
    finally:
        close_client(client)
    assert len(_stored_versions(broker, topic)) == 1


def test_a_compatible_evolution_becomes_the_next_version(broker: BrokerThread) -> None:
    topic = _topic()
    client = new_client(broker.url)
    try:
        old = client.create_producer(topic, schema=AvroSchema(Point))
        new = client.create_producer(topic, schema=AvroSchema(PointWithZ))
        again = client.create_producer(topic, schema=AvroSchema(Point))  # a known version
        for producer in (old, new, again):
            producer.close()
    finally:
        close_client(client)
    versions = [json.loads(v) for v in _stored_versions(broker, topic)]
    assert [[f["name"] for f in v["fields"]] for v in versions] == [["x", "y"], ["x", "y", "z"]]


def test_the_namespace_strategy_takes_effect_on_the_next_producer(broker: BrokerThread) -> None:
    topic = _topic()
    client = new_client(broker.url)
    try:
        client.create_producer(topic, schema=AvroSchema(Person))
        with pytest.raises(pulsar.IncompatibleSchema):  # FULL: Person cannot read a null-less age
            client.create_producer(topic, schema=AvroSchema(PersonStrictAge))
        _set_strategy(broker, "FORWARD")  # only the existing version must read the new data
        client.create_producer(topic, schema=AvroSchema(PersonStrictAge))
        _set_strategy(broker, "ALWAYS_INCOMPATIBLE")
        client.create_producer(topic, schema=AvroSchema(Person))  # known versions still serve
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(TextPoint))
        _set_strategy(broker, "ALWAYS_COMPATIBLE")
        client.create_producer(topic, schema=StringSchema())  # even a change of type
    finally:
        close_client(client)
    assert len(_stored_versions(broker, topic)) == 3


def test_transitive_strategies_check_every_version(broker: BrokerThread) -> None:
    # Point, then PointWithZ (z has a default), then z without its default: the last one reads
    # PointWithZ's data but not Point's, so BACKWARD takes it and BACKWARD_TRANSITIVE does not.
    client = new_client(broker.url)
    try:
        for strategy, accepted in (("BACKWARD", True), ("BACKWARD_TRANSITIVE", False)):
            _set_strategy(broker, strategy)
            topic = _topic()
            client.create_producer(topic, schema=AvroSchema(Point))
            client.create_producer(topic, schema=AvroSchema(PointWithZ))
            if accepted:
                client.create_producer(topic, schema=AvroSchema(PointZWithoutDefault))
            else:
                with pytest.raises(pulsar.IncompatibleSchema):
                    client.create_producer(topic, schema=AvroSchema(PointZWithoutDefault))
    finally:
        close_client(client)


def test_auto_update_off_serves_known_versions_only(broker: BrokerThread) -> None:
    topic = _topic()
    client = new_client(broker.url)
    try:
        client.create_producer(topic, schema=AvroSchema(Point))
        assert _admin(broker, "POST", f"{NAMESPACE}/isAllowAutoUpdateSchema", False)[0] == 204
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(PointWithZ))
        client.create_producer(topic, schema=AvroSchema(Point))
    finally:
        close_client(client)


def test_enforced_validation_refuses_producers_without_a_schema(broker: BrokerThread) -> None:
    topic, bare = _topic(), _topic()
    client = new_client(broker.url)
    try:
        client.create_producer(topic, schema=StringSchema())
        client.create_producer(topic).close()  # not enforced: a bytes producer is welcome
        assert _admin(broker, "POST", f"{NAMESPACE}/schemaValidationEnforced", True)[0] == 204
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic)
        client.create_producer(bare).close()  # a topic without a schema takes anyone
    finally:
        close_client(client)


def test_a_consumer_schema_is_added_to_an_idle_topic_only(broker: BrokerThread) -> None:
    idle, busy = _topic(), _topic()
    client = new_client(broker.url)
    try:
        client.subscribe(idle, "sub", schema=JsonSchema(Point)).close()
        assert len(_stored_versions(broker, idle)) == 1
        client.create_producer(busy).send(b"raw bytes")  # entries, no schema
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(busy, "sub", schema=JsonSchema(Point))
    finally:
        close_client(client)
    assert _stored_versions(broker, busy) == []


def test_our_client_is_refused_with_incompatible_schema(broker: BrokerThread) -> None:
    class OurPoint(our_schema.Record):
        _avro_name = "Point"
        x = our_schema.Integer()
        y = our_schema.Integer()

    class OurTextPoint(our_schema.Record):
        _avro_name = "Point"
        x = our_schema.String()
        y = our_schema.Integer()

    topic = _topic()
    client = ours.Client(broker.url, operation_timeout_seconds=15)
    try:
        client.create_producer(topic, schema=our_schema.JsonSchema(OurPoint))
        with pytest.raises(ours.IncompatibleSchema):
            client.create_producer(topic, schema=our_schema.JsonSchema(OurTextPoint))
        with pytest.raises(ours.IncompatibleSchema):
            client.subscribe(topic, "sub", schema=our_schema.JsonSchema(OurTextPoint))
    finally:
        client.close()


def test_get_or_create_schema_is_judged_as_a_producer(broker: BrokerThread) -> None:
    topic = _topic()
    point, text = json.dumps(Point.schema()), json.dumps(TextPoint.schema())
    with RawSession(broker.port) as session:
        for request_id, (data, refused) in enumerate([(point, False), (text, True)], start=1):
            cmd = pb.BaseCommand(type=pb.BaseCommand.Type.GET_OR_CREATE_SCHEMA)
            cmd.getOrCreateSchema.request_id = request_id
            cmd.getOrCreateSchema.topic = topic
            cmd.getOrCreateSchema.schema.CopyFrom(
                pb.Schema(name="P", schema_data=data.encode(), type=pb.Schema.Json)
            )
            frame = session.request(commands.encode_command(cmd), request_id)
            reply = frame.command.getOrCreateSchemaResponse
            assert reply.HasField("error_code") is refused
            if refused:
                assert reply.error_code == pb.ServerError.Value("IncompatibleSchema")
                assert "field 'x'" in reply.error_message


def test_the_namespace_schema_policies_over_rest(broker: BrokerThread) -> None:
    path = f"{NAMESPACE}/schemaCompatibilityStrategy"
    assert _admin(broker, "GET", path) == (200, "UNDEFINED")  # the broker's FULL applies
    assert _admin(broker, "PUT", path, "BACKWARD_TRANSITIVE")[0] == 204
    assert _admin(broker, "GET", path) == (200, "BACKWARD_TRANSITIVE")
    assert _admin(broker, "PUT", path, "SIDEWAYS")[0] == 400
    assert _admin(broker, "GET", f"{NAMESPACE}/isAllowAutoUpdateSchema") == (200, True)
    assert _admin(broker, "GET", f"{NAMESPACE}/schemaValidationEnforced") == (200, False)
    assert _admin(broker, "POST", f"{NAMESPACE}/schemaValidationEnforced", True)[0] == 204
    auto = f"{NAMESPACE}/schemaAutoUpdateCompatibilityStrategy"
    assert _admin(broker, "PUT", auto, "Forward")[0] == 204
    assert _admin(broker, "PUT", auto, "Sideways")[0] == 400
    status, policies = _admin(broker, "GET", NAMESPACE)
    assert status == 200
    assert policies["schema_compatibility_strategy"] == "BACKWARD_TRANSITIVE"
    assert policies["schema_auto_update_compatibility_strategy"] == "Forward"
    assert policies["schema_validation_enforced"] is True
    assert policies["is_allow_auto_update_schema"] is True
    assert _admin(broker, "PUT", path, "UNDEFINED")[0] == 204  # back to the older policy
    assert _admin(broker, "GET", path) == (200, "FORWARD")


def test_the_admin_cli_sets_and_shows_the_schema_policies(broker: BrokerThread) -> None:
    def admin(*args: str) -> str:
        result = CliRunner().invoke(
            admin_main, ["--admin-url", broker.http, "namespaces", *args], catch_exceptions=False
        )
        assert result.exit_code == 0, (args, result.output)
        return result.output

    admin("set-schema-compatibility-strategy", "public/default", "-c", "forward_transitive")
    assert "FORWARD_TRANSITIVE" in admin("get-schema-compatibility-strategy", "public/default")
    admin("set-is-allow-auto-update-schema", "public/default", "--disable")
    assert "false" in admin("get-is-allow-auto-update-schema", "public/default").lower()
    admin("set-schema-validation-enforce", "public/default", "--enable")
    assert "true" in admin("get-schema-validation-enforce", "public/default").lower()
    assert broker.broker is not None
    service = broker.broker.service
    policy = SchemaRegistry(service.schemas, service.policies, service.config).policy(
        TopicName.parse("persistent://public/default/t")
    )
    assert (policy.strategy, policy.allow_auto_update, policy.validation_enforced) == (
        Strategy.FORWARD_TRANSITIVE,
        False,
        True,
    )
