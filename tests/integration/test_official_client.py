"""The official pulsar-client (C++ core) against an in-process Magnetar broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerThread, broker_config

pytestmark = [pytest.mark.integration, pytest.mark.compat]


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        broker.url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        yield c
    finally:
        c.close()


def topic_name() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"


def receive_all(
    consumer: pulsar.Consumer, count: int, timeout_ms: int = 5000
) -> list[pulsar.Message]:
    return [consumer.receive(timeout_ms) for _ in range(count)]


def assert_nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_ms)


# --------------------------------------------------------------------------- produce / consume


@pytest.mark.parametrize("batching", [False, True])
def test_produce_consume_ids_match(client: pulsar.Client, batching: bool) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=10)
    if batching:
        sent_ids = []
        for i in range(25):
            producer.send_async(f"m-{i}".encode(), lambda res, mid: sent_ids.append(mid))
        producer.flush()
        assert len(sent_ids) == 25
    else:
        sent_ids = [producer.send(f"m-{i}".encode()) for i in range(25)]
    received = receive_all(consumer, 25)
    assert [m.data() for m in received] == [f"m-{i}".encode() for i in range(25)]
    assert [str(m.message_id()) for m in received] == [str(i) for i in sent_ids]
    for m in received:
        consumer.acknowledge(m)
    assert_nothing_more(consumer)


def test_entry_ids_count_from_zero_one_per_send(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic)
    ids = [producer.send(b"x") for _ in range(3)]
    assert [i.entry_id() for i in ids] == [0, 1, 2]
    assert len({i.ledger_id() for i in ids}) == 1


def test_properties_keys_event_time_and_compression(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub")
    for compression in (pulsar.CompressionType.LZ4, pulsar.CompressionType.ZSTD):
        producer = client.create_producer(
            topic, compression_type=compression, batching_enabled=True
        )
        producer.send(
            b"payload" * 100,
            properties={"a": "1", "b": "two"},
            partition_key="key-1",
            event_timestamp=123456789,
        )
        producer.flush()
        msg = consumer.receive(5000)
        assert msg.data() == b"payload" * 100
        assert msg.properties() == {"a": "1", "b": "two"}
        assert msg.partition_key() == "key-1"
        assert msg.event_timestamp() == 123456789
        consumer.acknowledge(msg)
        producer.close()


def test_max_message_size(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    # maxMessageSize (5 MiB) bounds metadata + payload, as the client checks it.
    big = b"\x01" * (5 * 1024 * 1024 - 128)
    producer.send(big)
    assert consumer.receive(10000).data() == big
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"\x01" * (5 * 1024 * 1024 + 1))


# --------------------------------------------------------------------------- subscription types


def test_exclusive_second_consumer_is_busy(client: pulsar.Client) -> None:
    topic = topic_name()
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)


def test_shared_round_robin_and_individual_ack_survives_reopen(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"msg-{i}".encode())
    received = receive_all(consumer, 4)
    consumer.acknowledge(received[0])
    consumer.acknowledge(received[2])
    consumer.close()
    time.sleep(0.3)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    again = receive_all(consumer, 2)
    assert sorted(m.data() for m in again) == [b"msg-1", b"msg-3"]
    assert_nothing_more(consumer)


def test_shared_two_consumers_split_the_work(client: pulsar.Client) -> None:
    topic = topic_name()
    c1 = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5
    )
    c2 = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5
    )
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"{i}".encode())
    got: list[bytes] = []
    for consumer in (c1, c2):
        while True:
            try:
                m = consumer.receive(500)
            except pulsar.Timeout:
                break
            got.append(m.data())
            consumer.acknowledge(m)
    assert sorted(got, key=int) == [f"{i}".encode() for i in range(40)]


def test_failover_switches_when_active_closes(client: pulsar.Client) -> None:
    topic = topic_name()
    c1 = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a"
    )
    c2 = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b"
    )
    producer = client.create_producer(topic)
    producer.send(b"one")
    first = c1.receive(5000)
    assert first.data() == b"one"
    assert_nothing_more(c2)
    c1.acknowledge(first)
    c1.close()
    producer.send(b"two")
    assert c2.receive(5000).data() == b"two"


def test_key_shared_keeps_per_key_order(client: pulsar.Client) -> None:
    topic = topic_name()
    consumers = [
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
        for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(8)]
    for i in range(80):
        producer.send(f"{i}".encode(), partition_key=keys[i % 8])
    seen: dict[str, list[int]] = {}
    owners: dict[str, set[int]] = {}
    for index, consumer in enumerate(consumers):
        while True:
            try:
                m = consumer.receive(500)
            except pulsar.Timeout:
                break
            seen.setdefault(m.partition_key(), []).append(int(m.data()))
            owners.setdefault(m.partition_key(), set()).add(index)
            consumer.acknowledge(m)
    assert sum(len(v) for v in seen.values()) == 80
    for key, values in seen.items():
        assert values == sorted(values), key
        assert len(owners[key]) == 1
    assert len({next(iter(o)) for o in owners.values()}) == 2  # both consumers got keys


# --------------------------------------------------------------------------- acks and redelivery


def test_cumulative_ack(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"{i}".encode())
    received = receive_all(consumer, 10)
    consumer.acknowledge_cumulative(received[5])
    consumer.close()
    time.sleep(0.3)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    again = receive_all(consumer, 4)
    assert [m.data() for m in again] == [b"6", b"7", b"8", b"9"]
    assert_nothing_more(consumer)


def test_negative_ack_redelivers_with_count(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic)
    producer.send(b"retry-me")
    first = consumer.receive(5000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    second = consumer.receive(5000)
    assert second.data() == b"retry-me"
    assert second.redelivery_count() == 1
    consumer.negative_acknowledge(second)
    third = consumer.receive(5000)
    assert third.redelivery_count() == 2
    consumer.acknowledge(third)
    assert_nothing_more(consumer)


def test_redeliver_unacknowledged_exclusive(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"{i}".encode())
    first = receive_all(consumer, 3)
    consumer.acknowledge(first[0])
    consumer.redeliver_unacknowledged_messages()
    again = receive_all(consumer, 2)
    assert [m.data() for m in again] == [b"1", b"2"]


def test_delayed_delivery_shared(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    started = time.time()
    producer.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=1500))
    producer.send(b"now")
    assert consumer.receive(5000).data() == b"now"
    late = consumer.receive(5000)
    assert late.data() == b"later"
    assert time.time() - started >= 1.4


def test_unsubscribe_deletes_subscription(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"a")
    consumer.unsubscribe()
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"b")
    assert consumer.receive(5000).data() == b"b"


# --------------------------------------------------------------------------- readers and seek


def _filled_topic(client: pulsar.Client, count: int, batching: bool = False) -> tuple[str, list]:
    topic = topic_name()
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=5)
    ids: list = []
    for i in range(count):
        producer.send_async(f"hello-{i}".encode(), lambda res, mid: ids.append(mid))
    producer.flush()
    producer.close()
    return topic, ids


def test_reader_from_earliest_latest_and_id(client: pulsar.Client) -> None:
    topic, ids = _filled_topic(client, 10)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(10)] == [
        f"hello-{i}".encode() for i in range(10)
    ]
    assert not reader.has_message_available()
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    exclusive = client.create_reader(topic, ids[4])
    assert exclusive.read_next(5000).data() == b"hello-5"
    inclusive = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"hello-4"


def test_reader_inside_a_batch(client: pulsar.Client) -> None:
    topic, ids = _filled_topic(client, 10, batching=True)
    assert ids[2].batch_index() >= 0
    reader = client.create_reader(topic, ids[2])
    assert reader.read_next(5000).data() == b"hello-3"
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"hello-2"


def test_has_message_available_positions(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic)
    empty_reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not empty_reader.has_message_available()
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    producer.send(b"one")
    assert empty_reader.has_message_available()
    assert empty_reader.read_next(5000).data() == b"one"
    assert not empty_reader.has_message_available()
    assert latest.has_message_available()
    assert latest.read_next(5000).data() == b"one"
    inclusive_latest = client.create_reader(
        topic, pulsar.MessageId.latest, start_message_id_inclusive=True
    )
    assert inclusive_latest.has_message_available()
    assert inclusive_latest.read_next(5000).data() == b"one"


def test_consumer_seek_by_id_and_time(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    stamps = []
    for i in range(20):
        stamps.append(int(time.time() * 1000))
        ids.append(producer.send(f"hello-{i}".encode()))
        time.sleep(0.005)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    receive_all(consumer, 20)
    consumer.seek(ids[10])
    assert consumer.receive(5000).data() == b"hello-11"
    consumer.seek(stamps[5])
    assert consumer.receive(5000).data() == b"hello-5"


def test_reader_seek_by_time_and_id(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic, batching_enabled=False)
    stamps = []
    ids = []
    for i in range(10):
        stamps.append(int(time.time() * 1000))
        ids.append(producer.send(f"hello-{i}".encode()))
        time.sleep(0.005)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    reader.seek(stamps[7])
    assert reader.read_next(5000).data() == b"hello-7"
    reader.seek(ids[2])
    assert reader.read_next(5000).data() == b"hello-3"


def test_get_last_message_id_batch_index(client: pulsar.Client) -> None:
    topic, ids = _filled_topic(client, 3, batching=True)
    consumer = client.subscribe(topic, "sub")
    last = consumer.get_last_message_id()
    assert last.entry_id() == ids[-1].entry_id()
    assert last.batch_index() == ids[-1].batch_index()


# --------------------------------------------------------------------------- asyncio client


def test_official_asyncio_api(broker: BrokerThread) -> None:
    import asyncio

    from pulsar.asyncio import Client as AsyncClient

    async def main() -> list[bytes]:
        client = AsyncClient(broker.url)
        try:
            topic = topic_name()
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            for i in range(5):
                await producer.send(f"a-{i}".encode())
            out = []
            for _ in range(5):
                msg = await consumer.receive()
                out.append(msg.data())
                await consumer.acknowledge(msg)
            await producer.close()
            await consumer.close()
            return out
        finally:
            await client.close()

    assert asyncio.run(main()) == [f"a-{i}".encode() for i in range(5)]


# --------------------------------------------------------------------------- namespaces and schema


def test_regex_consumer_uses_topics_of_namespace(client: pulsar.Client) -> None:
    import re

    prefix = f"rx-{uuid.uuid4().hex[:6]}"
    producers = [
        client.create_producer(f"persistent://public/default/{prefix}-{i}") for i in range(2)
    ]
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for i, producer in enumerate(producers):
        producer.send(f"from-{i}".encode())
    got = sorted(consumer.receive(5000).data() for _ in range(2))
    assert got == [b"from-0", b"from-1"]


def test_unknown_namespace_is_topic_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://no-such-tenant/no-ns/t")


def test_schema_is_stored_and_served(client: pulsar.Client) -> None:
    topic = topic_name()
    producer = client.create_producer(topic, schema=pulsar.schema.StringSchema())
    consumer = client.subscribe(
        topic,
        "sub",
        schema=pulsar.schema.StringSchema(),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer.send("héllo")
    assert consumer.receive(5000).value() == "héllo"
    # GET_SCHEMA through the C++ core (what AvroSchema's decoder calls).
    info = client._client.get_schema_info(topic, 0)
    assert info.schema_type() == pulsar.schema.StringSchema().schema_info().schema_type()


def test_null_value_message_passes_through(client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(None, partition_key="deleted-key")
    msg = consumer.receive(5000)
    assert msg.has_null_value()
    assert msg.partition_key() == "deleted-key"


# --------------------------------------------------------------------------- broker settings


def test_auto_topic_creation_disabled(tmp_path: Path) -> None:
    running = BrokerThread(
        broker_config(tmp_path / "data", allow_auto_topic_creation=False)
    ).start()
    c = pulsar.Client(running.url, operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            c.create_producer(topic_name())
    finally:
        c.close()
        running.stop()


def test_keepalive_closes_silent_peer_but_not_a_live_client(tmp_path: Path) -> None:
    import socket

    from protocol import commands

    running = BrokerThread(broker_config(tmp_path / "data", keep_alive_interval_seconds=1)).start()
    live = pulsar.Client(running.url)  # answers our PINGs (its own interval is 30 s)
    try:
        producer = live.create_producer(topic_name())
        with socket.create_connection(("127.0.0.1", running.port), timeout=5) as silent:
            silent.sendall(commands.connect("silent", protocol_version=20))
            silent.settimeout(5)
            closed = False
            started = time.monotonic()
            while time.monotonic() - started < 5:
                if not silent.recv(65536):  # PINGs arrive, we never answer
                    closed = True
                    break
            assert closed
            assert time.monotonic() - started >= 1.0
        producer.send(b"still connected after several keep-alive rounds")
    finally:
        live.close()
        running.stop()
