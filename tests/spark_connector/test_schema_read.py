"""The source on topics with schemas: JSON/Avro fields as columns, a typed primitive ``value``,
each message decoded with its own schema version, and ``decodeSchema=false`` (real Spark)."""

from __future__ import annotations

from typing import Any

import pytest

from client.schema import Array as ArrayField
from client.schema import AvroSchema, Double, Integer, JsonSchema, Map, Record, String, StringSchema
from client.sync import Client
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.integration]


class Reading(Record):
    sensor = String()
    level = Integer()
    tags = ArrayField(String())
    extra = Map(Double())


# Two versions of one record: the second adds a field with a default (FULL-compatible).
SENSOR = {"name": "sensor", "type": "string"}
LEVEL = {"name": "level", "type": ["null", "int"], "default": None}
V1 = {"type": "record", "name": "Versioned", "fields": [SENSOR]}
V2 = {"type": "record", "name": "Versioned", "fields": [SENSOR, LEVEL]}


def _send(url: str, topic: str, schema: Any, values: list[Any]) -> None:
    with Client(url) as client:
        producer = client.create_producer(topic, schema=schema)
        for value in values:
            producer.send(value)
        producer.close()


def _read(spark: Any, url: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("dedup-topic").option("service.url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _readings(n: int) -> list[Reading]:
    return [Reading(sensor=f"s{i}", level=i, tags=[f"t{i}"], extra={"x": i / 2}) for i in range(n)]


@pytest.mark.parametrize("schema_class", [JsonSchema, AvroSchema])
def test_record_schema_reads_as_columns(
    spark: Any, broker: BrokerThread, schema_class: Any
) -> None:
    topic = f"persistent://public/default/schema-read-{schema_class.__name__}"
    _send(broker.url, topic, schema_class(Reading), _readings(5))
    frame = _read(spark, broker.url, topic)
    assert frame.columns[:4] == ["sensor", "level", "tags", "extra"]
    assert "value" not in frame.columns
    assert "offset" in frame.columns
    assert dict(frame.dtypes)["extra"] == "map<string,double>"
    rows = sorted(frame.select("sensor", "level", "tags", "extra", "topic").collect())
    assert [(r.sensor, r.level, r.tags, r.extra, r.topic) for r in rows] == [
        (f"s{i}", i, [f"t{i}"], {"x": i / 2}, topic) for i in range(5)
    ]


def test_string_schema_reads_as_a_string_value(spark: Any, broker: BrokerThread) -> None:
    topic = "persistent://public/default/schema-read-string"
    _send(broker.url, topic, StringSchema(), ["héllo", "world"])
    frame = _read(spark, broker.url, topic)
    assert dict(frame.dtypes)["value"] == "string"
    assert sorted(r.value for r in frame.collect()) == ["héllo", "world"]


def test_each_message_decodes_with_its_own_schema_version(spark: Any, broker: BrokerThread) -> None:
    topic = "persistent://public/default/schema-read-versions"
    _send(broker.url, topic, AvroSchema(None, V1), [{"sensor": "old"}])
    _send(broker.url, topic, AvroSchema(None, V2), [{"sensor": "new", "level": 7}])
    frame = _read(spark, broker.url, topic)
    assert frame.columns[:2] == ["sensor", "level"]  # the latest version's fields
    rows = frame.orderBy("offset").select("sensor", "level").collect()
    assert [tuple(r) for r in rows] == [("old", None), ("new", 7)]


def test_decode_schema_false_reads_raw_bytes(spark: Any, broker: BrokerThread) -> None:
    topic = "persistent://public/default/schema-read-raw"
    _send(broker.url, topic, JsonSchema(Reading), _readings(2))
    frame = _read(spark, broker.url, topic, decodeSchema="false")
    assert dict(frame.dtypes)["value"] == "binary"
    values = sorted(bytes(r.value) for r in frame.collect())
    assert values == sorted(JsonSchema(Reading).encode(r) for r in _readings(2))
