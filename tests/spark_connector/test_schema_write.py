"""The sink on a topic with a record schema: the DataFrame's columns encoded with it, read back
by our client as Records; a DataFrame that does not fit is refused at planning (real Spark)."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from client.message_id import MessageId
from client.schema import Array, Double, Integer, JsonSchema, Map, Record, String
from client.sync import Client
from spark_connector.option_table import OptionError
from spark_connector.schema_fetch import TopicSchema
from spark_connector.schema_write import plan_encoding
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.integration]


class Reading(Record):
    sensor = String()
    level = Integer()
    tags = Array(String())
    extra = Map(Double())


def _with_schema(url: str, topic: str) -> None:
    """Give ``topic`` its JSON schema (a producer declaring it registers it)."""
    with Client(url) as client:
        client.create_producer(topic, schema=JsonSchema(Reading)).close()


def _write(frame: Any, url: str, topic: str) -> None:
    frame.write.format("dedup-topic").option("service.url", url).option("topic", topic).mode(
        "append"
    ).save()


def _read_back(url: str, topic: str) -> list[tuple[Any, str | None, bytes]]:
    with Client(url) as client:
        reader = client.create_reader(topic, MessageId.earliest, schema=JsonSchema(Reading))
        out: list[tuple[Any, str | None, bytes]] = []
        while reader.has_message_available():
            message = reader.read_next(10_000)
            out.append((message.value(), message.partition_key(), message.schema_version()))
        reader.close()
        return out


def test_dataframe_is_written_as_records_of_the_topic_schema(
    spark: Any, broker: BrokerThread
) -> None:
    topic = "persistent://public/default/schema-write-json"
    _with_schema(broker.url, topic)
    rows = [(f"s{i}", i, [f"t{i}"], {"x": i / 2}, f"k{i}") for i in range(30)]
    frame = spark.createDataFrame(
        rows, "sensor string, level int, tags array<string>, extra map<string,double>, key string"
    ).repartition(2)
    _write(frame, broker.url, topic)
    stored = _read_back(broker.url, topic)
    assert sorted((r.sensor, r.level, r.tags, r.extra, key) for r, key, _ in stored) == sorted(rows)
    assert {version for _, _, version in stored} == {(0).to_bytes(8, "big")}
    # Exactly-once holds as for bytes: the same write again (same writeId) adds nothing.
    frame.write.format("dedup-topic").option("service.url", broker.url).option(
        "topic", topic
    ).option("writeId", "w1").mode("append").save()
    frame.write.format("dedup-topic").option("service.url", broker.url).option(
        "topic", topic
    ).option("writeId", "w1").mode("append").save()
    assert len(_read_back(broker.url, topic)) == 60


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("sensor string, colour string", "column 'colour' is not a field"),
        ("sensor string, level string", "column 'level' has type string"),
        ("sensor string, value binary", "not both"),
    ],
)
def test_dataframe_that_does_not_fit_the_schema_is_refused(
    spark: Any, broker: BrokerThread, ddl: str, message: str
) -> None:
    topic = "persistent://public/default/schema-write-refused"
    _with_schema(broker.url, topic)
    frame = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        _write(frame, broker.url, topic)
    assert _read_back(broker.url, topic) == []


def _stored(definition: dict[str, Any], schema_type: int = 4) -> TopicSchema:
    return TopicSchema(schema_type, json.dumps(definition).encode(), b"\x00" * 8, b"")


STRICT = {
    "type": "record",
    "name": "Strict",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": "string", "default": ""},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def test_plan_checks_required_fields_widening_and_order_columns() -> None:
    with pytest.raises(OptionError, match="field 'at' is required"):
        plan_encoding(_stored(STRICT), [("id", "bigint")], ())
    # int widens to long; an orderBy column that is no field is not sent; metadata stays.
    fields = [("key", "string"), ("id", "int"), ("at", "timestamp"), ("rank", "int")]
    encoding = plan_encoding(_stored(STRICT), fields, ("rank",))
    assert encoding is not None
    assert encoding.columns == ((1, "id"), (2, "at"))
    # Only value and metadata: the bytes go out as they are.
    assert plan_encoding(_stored(STRICT), [("value", "binary"), ("key", "string")], ()) is None


def test_rows_are_encoded_as_avro_and_json_records() -> None:
    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {"id": pa.array([1, 2], pa.int64()), "at": pa.array([at, at], pa.timestamp("us", "UTC"))}
    )
    for schema_type in (2, 4):
        stored = _stored(STRICT, schema_type)
        encoding = plan_encoding(stored, [("id", "bigint"), ("at", "timestamp")], ())
        assert encoding is not None
        (out,) = list(encoding.encode(iter([batch])))
        assert out.schema.names == ["id", "at", "value"]
        payload = out.column(2)[0].as_py()
        if schema_type == 4:
            parsed = fastavro.parse_schema(STRICT)
            record = fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
            assert record == {"id": 1, "note": "", "at": at}
        else:
            assert json.loads(payload) == {"id": 1, "at": int(at.timestamp() * 1000)}
