"""Option parsing and sink column planning (pure, no JVM)."""

from __future__ import annotations

import pytest

from spark_connector.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    order_columns,
    sink_column_plan,
)

URL = {"service.url": "pulsar://127.0.0.1:6650"}


def test_source_topics_and_aliases() -> None:
    options = SourceOptions.parse({**URL, "Subscribe": "b, a ,a"})
    assert options.topics == ("persistent://public/default/a", "persistent://public/default/b")
    assert SourceOptions.parse({**URL, "topic": "x"}).fail_on_data_loss is True
    parsed = SourceOptions.parse(
        {**URL, "topicsPattern": "t-.*", "maxOffsetsPerTrigger": "7", "failOnDataLoss": "false"}
    )
    assert parsed.topics_pattern == "t-.*"
    assert parsed.max_offsets_per_trigger == 7
    assert parsed.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "x"}, "service.url"),
        ({**URL}, "exactly one of"),
        ({**URL, "topic": "x", "topics": "y"}, "exactly one of"),
        ({**URL, "topics": "a", "subscribe": "b"}, "given twice"),
        ({**URL, "topic": "x", "maxOffsetsPerTrigger": "0"}, "maxoffsetspertrigger"),
        ({**URL, "topic": "x", "failOnDataLoss": "maybe"}, "true or false"),
        ({**URL, "topicsPattern": "("}, "not a regex"),
    ],
)
def test_source_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options)


def test_sink_defaults() -> None:
    options = SinkOptions.parse({**URL, "topic": "out", "client.operation_timeout_seconds": "5"})
    assert options.exactly_once is True
    assert options.producer_name_prefix == "spark"
    assert options.topic == "persistent://public/default/out"
    assert options.client_options == {"operation_timeout_seconds": 5}


def test_sink_columns() -> None:
    fields = [
        ("value", "binary"),
        ("__key", "string"),
        ("offset", "bigint"),
        ("properties", "map<string,string>"),
    ]
    assert sink_column_plan(fields, "t") == {"value": 0, "key": 1, "properties": 3}


@pytest.mark.parametrize(
    ("fields", "topic", "message"),
    [
        ([("value", "binary"), ("colour", "int")], "t", "unknown input column 'colour'"),
        ([("value", "int")], "t", "has type int"),
        ([("key", "string")], "t", "'value' column"),
        ([("value", "string")], None, "'topic' option or a 'topic' column"),
        ([("value", "string"), ("key", "string"), ("__key", "binary")], "t", "given twice"),
    ],
)
def test_sink_column_errors(fields: list[tuple[str, str]], topic: str | None, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        sink_column_plan(fields, topic)


def test_sink_ordering_and_expiry_options() -> None:
    options = SinkOptions.parse(
        {
            **URL,
            "topic": "out",
            "exactlyOnce.orderBy": "id, seq",
            "exactlyOnce.sortBufferBytes": "4096",
            "brokerDeduplicationProducerInactivityTimeoutMinutes": "0.5",
            "checkpointLocation": "/tmp/ckpt",
        }
    )
    assert options.order_by == ("id", "seq")
    assert options.sort_buffer_bytes == 4096
    assert options.dedup_timeout_minutes == 0.5
    assert options.checkpoint_location == "/tmp/ckpt"
    assert SinkOptions.parse({**URL, "topic": "t"}).dedup_timeout_minutes == 360.0
    with pytest.raises(OptionError, match="number of minutes"):
        SinkOptions.parse({**URL, "brokerDeduplicationProducerInactivityTimeoutMinutes": "6h"})
    with pytest.raises(OptionError, match=">= 0"):
        SinkOptions.parse({**URL, "brokerDeduplicationProducerInactivityTimeoutMinutes": "-1"})


def test_order_columns_default_to_the_source_position() -> None:
    source = [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
    ]
    assert order_columns(source, ()) == (2, 3, 4)
    assert order_columns([("value", "binary"), ("offset", "bigint")], ()) == (1,)
    assert order_columns([("value", "binary"), ("key", "binary")], ()) == ()
    # Named columns win; they are accepted as input columns without being sent.
    fields = [("value", "binary"), ("id", "bigint")]
    assert order_columns(fields, ("id",)) == (1,)
    assert sink_column_plan(fields, "t", ("id",)) == {"value": 0}
    with pytest.raises(OptionError, match="unknown input column 'id'"):
        sink_column_plan(fields, "t")
    with pytest.raises(OptionError, match="does not have: nope"):
        order_columns(fields, ("nope",))
