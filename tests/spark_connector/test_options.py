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
        ({**URL, "topic": "x", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
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


# --- names users bring from the Kafka connector and pulsar-spark ---------------------------


def test_unknown_options_fail_with_the_closest_names() -> None:
    with pytest.raises(
        OptionError,
        match=r"unknown source option 'maxoffsetpertrigger'.*"
        r"did you mean 'maxOffsetsPerTrigger'",
    ):
        SourceOptions.parse({**URL, "topic": "x", "maxOffsetPerTrigger": "5"})
    with pytest.raises(OptionError, match=r"unknown sink option 'topik'.*'topic'"):
        SinkOptions.parse({**URL, "topik": "x"})
    with pytest.raises(OptionError, match="unknown source option 'colour'") as caught:
        SourceOptions.parse({**URL, "topic": "x", "colour": "blue"})
    assert "did you mean" not in str(caught.value)
    # The other side's options are named as such; foreign names say what to use instead.
    with pytest.raises(OptionError, match="'startingOffsets' applies to the source only"):
        SinkOptions.parse({**URL, "topic": "x", "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="'exactlyOnce' applies to the sink only"):
        SourceOptions.parse({**URL, "topic": "x", "exactlyOnce": "true"})
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers.*service\.url"):
        SourceOptions.parse({**URL, "topic": "x", "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(OptionError, match=r"maxbytespertrigger.*not supported"):
        SourceOptions.parse({**URL, "topic": "x", "maxBytesPerTrigger": "1000"})
    with pytest.raises(OptionError, match="use the client's token or basic credentials"):
        SourceOptions.parse({**URL, "topic": "x", "pulsar.admin.authParams": "token:t"})


def test_what_spark_passes_is_accepted() -> None:
    """Measured with pyspark 4.3: ``path`` (load/save), ``checkpointLocation`` and
    ``queryName`` (writeStream)."""
    SourceOptions.parse({**URL, "topic": "x", "path": "/p"})
    SinkOptions.parse({**URL, "topic": "x", "path": "/p", "queryName": "q"})
    assert SinkOptions.parse({**URL, "topic": "x", "checkpointLocation": "/c"}).checkpoint_location


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("failOnDataLoss", "1", "'failOnDataLoss' must be true or false, not '1'"),
        ("includeHeaders", "yes", "'includeHeaders' must be true or false, not 'yes'"),
        ("maxOffsetsPerTrigger", "10k", "'maxOffsetsPerTrigger' must be an integer, not '10k'"),
        ("maxOffsetsPerTrigger", str(1 << 63), "must fit a 64-bit integer"),
        ("minPartitions", "0", "'minPartitions' must be >= 1"),
        ("pollTimeoutMs", "1.5", "'pollTimeoutMs' must be an integer"),
        ("startingTimestamp", "yesterday", "'startingtimestamp'.*not a time in ms"),
        ("startingOffsetsByTimestamp", "{", "'startingoffsetsbytimestamp' is not valid JSON"),
        ("startingOffsets", "[1]", "'startingoffsets'.*must be an object"),
        ("startingOffsetsByTimestampStrategy", "first", "must be error or latest"),
        ("admin.url", "localhost:8080", "must be an http"),
    ],
)
def test_typed_values(option: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({**URL, "topic": "x", option: value})


def test_booleans_are_true_or_false_in_any_case() -> None:
    assert (
        SourceOptions.parse({**URL, "topic": "x", "failOnDataLoss": "FALSE"}).fail_on_data_loss
        is False
    )
    assert SourceOptions.parse({**URL, "topic": "x", "includeHeaders": "True"}).include_headers


def test_kafka_and_pulsar_spark_names() -> None:
    options = SourceOptions.parse(
        {
            **URL,
            "assign": '{"a": [1, 0, 1], "persistent://t/n/b": [2]}',
            "maxEntriesPerTrigger": "50",
            "minPartitions": "8",
            "includeHeaders": "true",
            "startingTime": "1700000000000",
            "predefinedSubscription": "mine",
            "kafkaConsumer.pollTimeoutMs": "500",
            "admin.url": "http://127.0.0.1:8080/",
        }
    )
    assert options.topics == ("persistent://public/default/a", "persistent://t/n/b")
    assert options.assign == {
        "persistent://public/default/a": (0, 1),
        "persistent://t/n/b": (2,),
    }
    assert options.max_offsets_per_trigger == 50
    assert options.min_partitions == 8
    assert options.include_headers is True
    assert options.starting == ("startingtimestamp", "1700000000000")
    assert options.subscription_name == "mine"
    assert options.poll_timeout_ms == 500
    assert options.admin_url == "http://127.0.0.1:8080"
    with pytest.raises(
        OptionError, match="give only one of 'startingtimestamp', 'startingoffsets'"
    ):
        SourceOptions.parse(
            {**URL, "topic": "x", "startingTimestamp": "1", "startingOffsets": "earliest"}
        )
    with pytest.raises(OptionError, match="exactly one of"):
        SourceOptions.parse({**URL, "topic": "x", "assign": '{"x": [0]}'})
    with pytest.raises(OptionError, match="partitions of 't' must be a list of ints"):
        SourceOptions.parse({**URL, "assign": '{"t": "0"}'})


def test_client_options_are_typed() -> None:
    """``tls_allow_insecure_connection=false`` is False (a string would be truthy)."""
    options = SourceOptions.parse(
        {
            **URL,
            "topic": "x",
            "client.tls_allow_insecure_connection": "false",
            "client.operation_timeout_seconds": "2.5",
            "pulsar.client.connectionTimeoutMs": "3000",
            "pulsar.client.tlsTrustCertsFilePath": "/ca.pem",
            "pulsar.client.tlsHostnameVerificationEnable": "true",
            "pulsar.client.keepAliveIntervalSeconds": "10",
        }
    )
    assert options.client_options == {
        "tls_allow_insecure_connection": False,
        "operation_timeout_seconds": 2.5,
        "connection_timeout_ms": 3000,
        "tls_trust_certs_file_path": "/ca.pem",
        "tls_validate_hostname": True,
        "keep_alive_interval_seconds": 10.0,
    }
    java = SourceOptions.parse({**URL, "topic": "x", "pulsar.client.operationTimeoutMs": "1500"})
    assert java.client_options == {"operation_timeout_seconds": 1.5}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("client.tls_allow_insecure_connection", "no", "must be true or false, not 'no'"),
        ("pulsar.client.tlsAllowInsecureConnection", "0", "must be true or false"),
        ("client.operation_timeout", "5", "did you mean .*'client.operation_timeout_seconds'"),
        ("pulsar.client.tlsTrustCertFilePath", "/x", "mean 'pulsar.client.tlsTrustCertsFilePath'"),
        ("pulsar.reader.readCompacted", "true", "not supported: a compacted read skips"),
        ("pulsar.reader.receiverQueueSize", "0", "receiverQueueSize' must be >= 1"),
        ("pulsar.reader.queueSize", "5", "did you mean 'pulsar.reader.receiverQueueSize'"),
    ],
)
def test_prefixed_option_errors(option: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({**URL, "topic": "x", option: value})


def test_both_spellings_of_one_setting_conflict() -> None:
    with pytest.raises(OptionError, match="which another option sets too"):
        SourceOptions.parse(
            {
                **URL,
                "topic": "x",
                "client.connection_timeout_ms": "1",
                "pulsar.client.connectionTimeoutMs": "2",
            }
        )


def test_reader_and_producer_prefixes() -> None:
    source = SourceOptions.parse(
        {
            **URL,
            "topic": "x",
            "pulsar.reader.receiverQueueSize": "50",
            "pulsar.reader.readerName": "r",
        }
    )
    assert source.reader_options == {"receiver_queue_size": 50, "reader_name": "r"}
    sink = SinkOptions.parse(
        {
            **URL,
            "topic": "x",
            "pulsar.producer.sendTimeoutMs": "5000",
            "pulsar.producer.batchingMaxMessages": "10",
            "pulsar.producer.batchingEnabled": "false",
        }
    )
    assert (sink.send_timeout_ms, sink.batching_max_messages, sink.batching_enabled) == (
        5000,
        10,
        False,
    )
    with pytest.raises(OptionError, match="the exactly-once sink names its producers"):
        SinkOptions.parse({**URL, "topic": "x", "pulsar.producer.producerName": "p"})
    with pytest.raises(OptionError, match="which another option sets too"):
        SinkOptions.parse(
            {**URL, "topic": "x", "sendTimeoutMs": "1", "pulsar.producer.sendTimeoutMs": "2"}
        )
    with pytest.raises(OptionError, match="unknown producer option"):
        SinkOptions.parse({**URL, "topic": "x", "pulsar.producer.compression": "LZ4"})


JAVA_TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.mark.parametrize("prefix", ["", "pulsar.client.", "client."])
def test_authentication_options(prefix: str) -> None:
    options = SinkOptions.parse(
        {
            **URL,
            "topic": "x",
            f"{prefix}authPluginClassName": JAVA_TOKEN,
            f"{prefix}authParams": "token:abc.def",
        }
    )
    spec = options.client_options["authentication"]
    assert (spec.method, spec.params) == ("token", (("token", "abc.def"),))
    assert "abc.def" not in repr(options)


@pytest.mark.parametrize(
    ("plugin", "params", "message"),
    [
        ("org.apache.pulsar.client.impl.auth.AuthenticationSasl", "{}", "is not supported"),
        ("token", "", "has no token"),
        ("basic", '{"userId": "u"}', "lacks password"),
        ("tls", "tlsCertFile:/c", "lacks tlsKeyFile"),
        ("oauth2", '{"issuerUrl": "http://i"', "not valid JSON"),
        ("oauth2", '{"issuerUrl": "http://i"}', "lacks private_key"),
        (None, "token:x", "needs 'authPluginClassName'"),
    ],
)
def test_authentication_errors(plugin: str | None, params: str, message: str) -> None:
    raw = {**URL, "topic": "x", "authParams": params}
    if plugin is not None:
        raw["authPluginClassName"] = plugin
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(raw)
