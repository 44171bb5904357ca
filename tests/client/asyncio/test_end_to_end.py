"""``client.asyncio`` against a real Magnetar broker: the behaviours the official
``pulsar.asyncio`` promises (batching by default, flush, keys, acknowledgements of the three
kinds, dead letters, seek with and without the start message, multi-topic and pattern
subscriptions, partitions, errors as ``PulsarException`` with the official codes, close and
shutdown), written against our port with official names only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import pytest

from client import ConsumerDeadLetterPolicy, ConsumerType, InitialPosition, MessageId, Result
from client.asyncio import Client, Consumer, Producer, PulsarException
from client.schema import AvroSchema, Integer, Record, String
from tests.helpers import BrokerThread, wait_until_async
from tests.integration.test_partitioned_topics import create_partitioned

pytestmark = [pytest.mark.integration]

T = TypeVar("T")
EARLIEST = InitialPosition.Earliest


def fresh(prefix: str) -> str:
    return f"asyncio-{prefix}-{uuid.uuid4().hex[:10]}"


async def within(awaitable: Awaitable[T], seconds: float = 10) -> T:
    """Await with a bound, so a missing message fails the test instead of hanging it."""
    return await asyncio.wait_for(awaitable, seconds)


@pytest.fixture
async def pulsar_client(running: BrokerThread) -> AsyncIterator[Client]:
    made = Client(running.url, operation_timeout_seconds=10)
    yield made
    await made.close()


async def send_numbered(producer: Producer, count: int, prefix: str = "msg") -> list[MessageId]:
    return [await producer.send(f"{prefix}-{i}".encode()) for i in range(count)]


async def receive_data(consumer: Consumer, count: int) -> list[bytes]:
    return [(await within(consumer.receive())).data() for _ in range(count)]


async def test_concurrent_sends_share_one_batch_and_a_new_subscription_starts_at_latest(
    pulsar_client: Client,
) -> None:
    topic = fresh("batch")
    producer = await pulsar_client.create_producer(topic, producer_name="batcher")
    assert producer.topic() == f"persistent://public/default/{topic}"
    assert producer.producer_name() == "batcher"
    ids = await asyncio.gather(*(producer.send(f"msg-{i}".encode()) for i in range(5)))
    assert producer.last_sequence_id() == 4
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(ids[0].ledger_id(), ids[0].entry_id())}
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3, 4]

    consumer = await pulsar_client.subscribe(topic, "sub", initial_position=EARLIEST)
    assert await receive_data(consumer, 5) == [f"msg-{i}".encode() for i in range(5)]
    await consumer.close()
    latest = await pulsar_client.subscribe(topic, "sub2")
    await producer.send(b"final")
    assert await receive_data(latest, 1) == [b"final"]


async def test_keys_and_properties_arrive(pulsar_client: Client) -> None:
    topic = fresh("keys")
    producer = await pulsar_client.create_producer(topic)
    consumer = await pulsar_client.subscribe(topic, "sub")
    await producer.send(b"m", partition_key="k0", ordering_key="k1", properties={"p": "v"})
    message = await within(consumer.receive())
    assert (message.data(), message.partition_key(), message.ordering_key()) == (b"m", "k0", "k1")
    assert message.properties() == {"p": "v"}


async def test_flush_sends_a_batch_that_would_otherwise_wait(pulsar_client: Client) -> None:
    producer = await pulsar_client.create_producer(
        fresh("flush"), batching_max_messages=3, batching_max_publish_delay_ms=60_000
    )
    sends = [asyncio.ensure_future(producer.send(f"msg-{i}".encode())) for i in range(2)]
    done, _ = await asyncio.wait(sends, timeout=0.3)
    assert not done  # two of three messages, a minute's delay: the batch is held
    await producer.flush()
    assert all(send.done() for send in sends)
    first, second = (send.result() for send in sends)
    assert (first.ledger_id(), first.entry_id()) == (second.ledger_id(), second.entry_id())
    assert (first.batch_index(), second.batch_index()) == (0, 1)


async def test_partitions_are_listed_and_a_consumer_reads_them_all(
    running: BrokerThread, pulsar_client: Client
) -> None:
    partitioned = create_partitioned(running.http, fresh("parts"), 3)
    names = [f"{partitioned}-partition-{i}" for i in range(3)]
    assert await pulsar_client.get_topic_partitions(partitioned) == names
    plain = f"persistent://public/default/{fresh('plain')}"
    assert await pulsar_client.get_topic_partitions(plain) == [plain]

    consumer = await pulsar_client.subscribe(partitioned, "sub", consumer_type=ConsumerType.Shared)
    producer = await pulsar_client.create_producer(partitioned)
    await producer.send(b"hello")
    assert (await within(consumer.receive())).topic_name() in names


async def test_failures_carry_the_official_result_codes(pulsar_client: Client) -> None:
    with pytest.raises(PulsarException) as unknown_tenant:
        await pulsar_client.create_producer(f"no-such-tenant/ns/{fresh('t')}")
    assert unknown_tenant.value.error() is Result.TopicNotFound

    producer = await pulsar_client.create_producer(fresh("big"))
    with pytest.raises(PulsarException) as too_big:
        await producer.send(b"x" * (10 * 1024 * 1024))
    assert too_big.value.error() is Result.MessageTooBig

    shared = await pulsar_client.subscribe(fresh("cumul"), "s", consumer_type=ConsumerType.Shared)
    with pytest.raises(PulsarException) as cumulative:
        await shared.acknowledge_cumulative(MessageId(-1, 0, 0))
    assert cumulative.value.error() is Result.CumulativeAcknowledgementNotAllowedError

    with pytest.raises(ValueError, match="crypto_key_reader"):  # not a CryptoKeyReader
        await pulsar_client.subscribe(fresh("t"), "s", crypto_key_reader=object())  # type: ignore[arg-type]


async def test_a_producer_closes_once_and_stops_being_connected(pulsar_client: Client) -> None:
    producer = await pulsar_client.create_producer(fresh("close"))
    assert producer.is_connected()
    await producer.close()
    assert not producer.is_connected()
    with pytest.raises(PulsarException) as again:
        await producer.close()
    assert again.value.error() is Result.AlreadyClosed
    consumer = await pulsar_client.subscribe(fresh("close"), "s")
    await consumer.close()
    await consumer.close()  # a consumer's second close is Ok, as the C++ consumer answers


async def test_shutdown_fails_what_waits_and_refuses_what_comes(running: BrokerThread) -> None:
    made = Client(running.url, operation_timeout_seconds=10)
    topic = fresh("shutdown")
    producer = await made.create_producer(topic, batching_max_publish_delay_ms=60_000)
    consumer = await made.subscribe(topic, "s")
    await producer.flush()
    waiting = asyncio.ensure_future(producer.send(b"held in a batch"))
    # Held in the producer's batch (counted as pending) before the shutdown comes.
    await wait_until_async(lambda: producer._producer._pending.messages == 1)
    made.shutdown()
    assert not producer.is_connected()
    for refused in (waiting, producer.send(b"x"), consumer.receive(), producer.close()):
        with pytest.raises(PulsarException) as closed:
            await refused
        assert closed.value.error() is Result.AlreadyClosed
    await made.close()  # after shutdown: Ok, and the connections are gone
    assert made._client.connections == []


async def test_shutdown_from_another_thread(running: BrokerThread) -> None:
    made = Client(running.url, operation_timeout_seconds=10)
    producer = await made.create_producer(fresh("shutdown-thread"))
    await asyncio.to_thread(made.shutdown)  # not on the client's loop: handed over to it
    with pytest.raises(PulsarException) as refused:
        await producer.send(b"x")
    assert refused.value.error() is Result.AlreadyClosed
    await made.close()
    assert made._client.connections == []


async def test_a_client_closes_once(running: BrokerThread) -> None:
    made = Client(running.url)
    producer = await made.create_producer(fresh("closing"))
    await made.close()
    with pytest.raises(PulsarException) as sent:
        await producer.send(b"late")
    assert sent.value.error() is Result.AlreadyClosed
    with pytest.raises(PulsarException) as again:
        await made.close()
    assert again.value.error() is Result.AlreadyClosed


async def test_cumulative_acknowledgement_survives_a_resubscription(pulsar_client: Client) -> None:
    topic = fresh("cumulative")
    consumer = await pulsar_client.subscribe(topic, "sub")
    producer = await pulsar_client.create_producer(topic)
    await send_numbered(producer, 5)
    last = None
    for _ in range(5):
        last = await within(consumer.receive())
    assert last is not None
    await consumer.acknowledge_cumulative(last)
    await consumer.close()
    consumer = await pulsar_client.subscribe(topic, "sub")
    await producer.send(b"final")
    assert await receive_data(consumer, 1) == [b"final"]


async def test_individual_acknowledgements_leave_the_others(pulsar_client: Client) -> None:
    topic = fresh("individual")
    shared = ConsumerType.Shared
    consumer = await pulsar_client.subscribe(topic, "sub", consumer_type=shared)
    producer = await pulsar_client.create_producer(topic)
    await send_numbered(producer, 5)
    messages = [await within(consumer.receive()) for _ in range(5)]
    for index in (0, 2, 4):
        await consumer.acknowledge(messages[index])
    await consumer.close()
    consumer = await pulsar_client.subscribe(topic, "sub", consumer_type=shared)
    assert await receive_data(consumer, 2) == [b"msg-1", b"msg-3"]


async def test_negative_acknowledgements_come_back_after_the_delay(pulsar_client: Client) -> None:
    topic = fresh("nack")
    consumer = await pulsar_client.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = await pulsar_client.create_producer(topic)
    await send_numbered(producer, 5)
    messages = [await within(consumer.receive()) for _ in range(5)]
    for index in (1, 3):
        await consumer.acknowledge(messages[index])
    for index in (0, 2, 4):
        await consumer.negative_acknowledge(messages[index])
    assert sorted(await receive_data(consumer, 3)) == [b"msg-0", b"msg-2", b"msg-4"]


async def test_topic_lists_and_patterns(pulsar_client: Client) -> None:
    prefix = fresh("multi")
    topics = [f"{prefix}-1", f"{prefix}-2"]
    producers = [await pulsar_client.create_producer(topic) for topic in topics]

    async def both(consumer: Consumer) -> None:
        got = set()
        for _ in range(2):
            message = await within(consumer.receive())
            got.add(message.data())
            await consumer.acknowledge(message.message_id())
        assert got == {b"from-1", b"from-2"}
        await consumer.close()

    listed = await pulsar_client.subscribe(topics, "sub")
    await producers[0].send(b"from-1")
    await producers[1].send(b"from-2")
    await both(listed)
    pattern = await pulsar_client.subscribe(
        f"public/default/{prefix}-.*", "sub-2", is_pattern_topic=True, initial_position=EARLIEST
    )
    await both(pattern)


async def test_last_message_id_follows_each_send(pulsar_client: Client) -> None:
    topic = fresh("last")
    consumer = await pulsar_client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    producer = await pulsar_client.create_producer(topic)
    for i in range(5):
        await producer.send(b"m")
        last = await consumer.get_last_message_id()
        assert last.entry_id() == i
        await consumer.acknowledge(last)


async def test_dead_letters_after_the_redeliveries(pulsar_client: Client) -> None:
    topic = fresh("dlq")
    dead_topic = f"{topic}-dead"
    shared = ConsumerType.Shared
    max_redeliveries, count = 2, 4
    dead = await pulsar_client.subscribe(dead_topic, "sub", consumer_type=shared)
    consumer = await pulsar_client.subscribe(
        topic,
        "sub",
        consumer_type=shared,
        dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliveries, dead_topic, "init-sub"),
    )
    producer = await pulsar_client.create_producer(topic)
    await send_numbered(producer, count, "hello")
    for _ in range(max_redeliveries + 1):
        await receive_data(consumer, count)
        consumer.redeliver_unacknowledged_messages()  # plain, as the official method
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(consumer.receive(), 0.3)
    assert sorted(await receive_data(dead, count)) == [f"hello-{i}".encode() for i in range(count)]
    await consumer.close()
    await dead.close()


async def test_unsubscribe_frees_an_exclusive_subscription(pulsar_client: Client) -> None:
    topic = fresh("unsub")
    consumer = await pulsar_client.subscribe(topic, "sub")
    with pytest.raises(PulsarException) as busy:
        await pulsar_client.subscribe(topic, "sub")
    assert busy.value.error() is Result.ConsumerBusy
    await consumer.unsubscribe()
    again = await pulsar_client.subscribe(topic, "sub")
    await again.close()


@pytest.mark.parametrize(("inclusive", "first"), [(False, b"msg-3"), (True, b"msg-2")])
async def test_seek_to_a_message_id(pulsar_client: Client, inclusive: bool, first: bytes) -> None:
    topic = fresh("seek")
    producer = await pulsar_client.create_producer(topic)
    ids = await send_numbered(producer, 5)
    consumer = await pulsar_client.subscribe(
        topic, "sub", initial_position=EARLIEST, start_message_id_inclusive=inclusive
    )
    await consumer.seek(ids[2])
    assert await receive_data(consumer, 1) == [first]
    with pytest.raises(ValueError):
        await consumer.seek("msg-2")  # type: ignore[arg-type]


async def test_seek_to_a_publish_time(pulsar_client: Client) -> None:
    topic = fresh("seek-time")
    consumer = await pulsar_client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = await pulsar_client.create_producer(topic)
    await send_numbered(producer, 5)
    messages = [await within(consumer.receive()) for _ in range(5)]
    assert [m.data() for m in messages] == [f"msg-{i}".encode() for i in range(5)]
    when = messages[3].publish_timestamp()
    # The first message published at or after that millisecond (msg-3, or one sent with it).
    expected = next(m.data() for m in messages if m.publish_timestamp() >= when)
    await consumer.seek(when)
    assert await receive_data(consumer, 1) == [expected]


async def test_names_of_a_consumer(pulsar_client: Client) -> None:
    topic = fresh("names")
    named = await pulsar_client.subscribe(topic, "sub", consumer_name="me")
    assert (named.topic(), named.subscription_name(), named.consumer_name()) == (
        f"persistent://public/default/{topic}",
        "sub",
        "me",
    )
    unnamed = [await pulsar_client.subscribe(topic, f"other-{i}") for i in range(2)]
    names = {consumer.consumer_name() for consumer in unnamed}
    assert len(names) == 2  # made up, one each, as the C++ client does
    assert "" not in names


async def test_avro_records_round_trip(pulsar_client: Client) -> None:
    class Example(Record):
        text = String()
        number = Integer()

    topic = fresh("schema")
    producer = await pulsar_client.create_producer(topic, schema=AvroSchema(Example))
    consumer = await pulsar_client.subscribe(topic, "sub", schema=AvroSchema(Example))
    await producer.send(Example(text="test", number=42))
    received = (await within(consumer.receive())).value()
    assert isinstance(received, Example)
    value: Any = received  # its fields read as values, not as the field declarations
    assert (value.text, value.number) == ("test", 42)
