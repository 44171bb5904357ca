"""End-to-end encryption between our client and the official one (C++ core), both ways.

Our producer's entries must decrypt in the official consumer and the official producer's in
ours (same PEM files, each side with its own ``CryptoKeyReader``), plain or batched, with and
without compression, chunked too; and our consumer must treat what it cannot decrypt as the
official one does (``crypto_failure_action`` FAIL / DISCARD / CONSUME).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pulsar
import pytest

import client
from tests.client.crypto.keys import KeyFiles, write_rsa_pair
from tests.helpers import BrokerThread, broker_config

pytestmark = [pytest.mark.integration, pytest.mark.compat]

KEY = "client-rsa.pem"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    running = BrokerThread(broker_config(tmp_path_factory.mktemp("encryption") / "data")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_rsa_pair(tmp_path_factory.mktemp("keys"), "client-rsa")


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    """A second pair: the wrong private key for what ``keys`` encrypted."""
    return write_rsa_pair(tmp_path_factory.mktemp("other"), "other-rsa")


@pytest.fixture(scope="module")
def official(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        broker.url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def ours(broker: BrokerThread) -> Iterator[client.Client]:
    c = client.Client(broker.url, operation_timeout_seconds=10)
    try:
        yield c
    finally:
        c.close()


def topic_name() -> str:
    return f"persistent://public/default/enc-{uuid.uuid4().hex[:10]}"


CODECS = [
    (client.CompressionType.NONE, pulsar.CompressionType.NONE),
    (client.CompressionType.LZ4, pulsar.CompressionType.LZ4),
    (client.CompressionType.ZSTD, pulsar.CompressionType.ZSTD),
]


def _context_fields(context: object) -> tuple[object, ...]:
    """What both clients' ``EncryptionContext`` must agree on (the IV and encrypted key are
    per entry: compared by length and name)."""
    assert context is not None
    keys = context.keys()  # type: ignore[attr-defined]
    return (
        [(k.key, len(k.value), k.metadata) for k in keys],
        len(context.param()),  # type: ignore[attr-defined]
        context.algorithm(),  # type: ignore[attr-defined]
        int(context.compression_type()),  # type: ignore[attr-defined]
        context.uncompressed_message_size(),  # type: ignore[attr-defined]
        context.batch_size(),  # type: ignore[attr-defined]
        context.is_decryption_failed(),  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("batching", [False, True])
@pytest.mark.parametrize(("ours_codec", "official_codec"), CODECS)
def test_ours_to_official_and_back(
    ours: client.Client,
    official: pulsar.Client,
    keys: KeyFiles,
    batching: bool,
    ours_codec: client.CompressionType,
    official_codec: pulsar.CompressionType,
) -> None:
    topic = topic_name()
    their_consumer = official.subscribe(
        topic, "theirs", crypto_key_reader=pulsar.CryptoKeyReader(*keys)
    )
    our_consumer = ours.subscribe(topic, "ours", crypto_key_reader=client.CryptoKeyReader(*keys))
    our_producer = ours.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=client.CryptoKeyReader(*keys),
        batching_enabled=batching,
        compression_type=ours_codec,
    )
    their_producer = official.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=pulsar.CryptoKeyReader(*keys),
        batching_enabled=batching,
        compression_type=official_codec,
    )
    sent = [f"ours-{i}".encode() * (i + 1) for i in range(5)]
    for payload in sent:
        our_producer.send_async(payload, None)
    our_producer.flush()
    sent_back = [f"theirs-{i}".encode() * (i + 1) for i in range(5)]
    for payload in sent_back:
        their_producer.send_async(payload, lambda res, mid: None)
    their_producer.flush()

    theirs_got = [their_consumer.receive(5000) for _ in range(10)]
    ours_got = [our_consumer.receive(5000) for _ in range(10)]
    assert [m.data() for m in theirs_got] == sent + sent_back
    assert [m.data() for m in ours_got] == sent + sent_back
    for mine, their in zip(ours_got, theirs_got, strict=True):
        assert str(mine.message_id()) == str(their.message_id())
        assert _context_fields(mine.encryption_context()) == _context_fields(
            their.encryption_context()
        )
    context = ours_got[0].encryption_context()
    assert context is not None
    assert context.keys()[0].key == KEY
    assert len(context.param()) == 12  # the GCM IV
    assert context.batch_size() == (5 if batching else -1)
    assert not context.is_decryption_failed()
    for producer in (our_producer, their_producer):
        producer.close()
    their_consumer.close()
    our_consumer.close()


def test_chunked_messages_both_ways(
    ours: client.Client, official: pulsar.Client, keys: KeyFiles, broker: BrokerThread
) -> None:
    """Each chunk is encrypted on its own (the C++ producer's format), and still fits the
    broker's limit once encrypted."""
    topic = topic_name()
    big = os.urandom(3 * broker.config.max_message_size // 2)
    their_consumer = official.subscribe(topic, "t", crypto_key_reader=pulsar.CryptoKeyReader(*keys))
    our_consumer = ours.subscribe(topic, "o", crypto_key_reader=client.CryptoKeyReader(*keys))
    our_producer = ours.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=client.CryptoKeyReader(*keys),
        chunking_enabled=True,
    )
    their_producer = official.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=pulsar.CryptoKeyReader(*keys),
        chunking_enabled=True,
        batching_enabled=False,
    )
    our_producer.send(big)
    their_producer.send(big[::-1])
    for consumer in (their_consumer, our_consumer):
        assert consumer.receive(10000).data() == big
        assert consumer.receive(10000).data() == big[::-1]
    for closable in (our_producer, their_producer, their_consumer, our_consumer):
        closable.close()


def test_failure_actions_as_the_official_test(
    ours: client.Client, official: pulsar.Client, keys: KeyFiles
) -> None:
    """The official ``test_encryption_failure``, with our consumers and readers, on entries the
    official producer wrote."""
    reader = client.CryptoKeyReader(*keys)
    topic = topic_name()
    producer = official.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=pulsar.CryptoKeyReader(*keys),
        compression_type=pulsar.CompressionType.LZ4,
    )
    producer.send(b"msg-0")

    def check_context(message: client.Message, failed: bool, batch_size: int) -> None:
        context = message.encryption_context()
        assert context is not None
        [key] = context.keys()
        assert (key.key, key.metadata) == (KEY, {})
        assert len(key.value) == 256
        assert len(context.param()) == 12
        assert context.algorithm() == ""
        assert context.compression_type() == client.CompressionType.LZ4
        if batch_size == -1:
            assert context.uncompressed_message_size() == len(b"msg-0")
        else:
            assert context.uncompressed_message_size() > len(b"msg-0")
        assert context.batch_size() == batch_size
        assert context.is_decryption_failed() is failed

    def next_is(value: bytes) -> None:
        consumer = ours.subscribe(topic, "my-sub", crypto_key_reader=reader)
        message = consumer.receive(3000)
        assert message.data() == value
        check_context(message, False, -1)
        consumer.acknowledge(message)
        consumer.close()

    consumer = ours.subscribe(
        topic,
        "my-sub",
        initial_position=client.InitialPosition.Earliest,
        crypto_failure_action=client.ConsumerCryptoFailureAction.FAIL,
    )
    with pytest.raises(client.Timeout):
        consumer.receive(1000)
    consumer.close()
    producer.send(b"msg-1")
    next_is(b"msg-0")  # held, not lost

    consumer = ours.subscribe(
        topic,
        "my-sub",
        initial_position=client.InitialPosition.Earliest,
        crypto_failure_action=client.ConsumerCryptoFailureAction.DISCARD,
    )
    with pytest.raises(client.Timeout):
        consumer.receive(1000)
    consumer.close()
    producer.send(b"msg-2")
    next_is(b"msg-2")  # msg-1 was discarded
    producer.close()

    producer = official.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=pulsar.CryptoKeyReader(*keys),
        compression_type=pulsar.CompressionType.LZ4,
        batching_enabled=True,
    )
    producer.send_async(b"msg-3", lambda res, mid: None)
    producer.send_async(b"msg-4", lambda res, mid: None)
    producer.flush()
    producer.close()

    # CONSUME: four messages, the batch of msg-3 and msg-4 as one, still encrypted.
    theirs = official.subscribe(
        topic,
        "their-sub",
        initial_position=pulsar.InitialPosition.Earliest,
        crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
    )
    consumer = ours.subscribe(
        topic,
        "another-sub",
        initial_position=client.InitialPosition.Earliest,
        crypto_failure_action=client.ConsumerCryptoFailureAction.CONSUME,
    )
    our_reader = ours.create_reader(
        topic,
        client.MessageId.earliest,
        crypto_failure_action=client.ConsumerCryptoFailureAction.CONSUME,
    )
    for i in range(4):
        expected = theirs.receive(3000)
        for message in (consumer.receive(3000), our_reader.read_next(3000)):
            assert message.data() == expected.data()  # the same encrypted bytes
            assert message.data() != f"msg-{i}".encode()
            assert str(message.message_id()) == str(expected.message_id())
            check_context(message, True, 2 if i >= 3 else -1)
    with pytest.raises(client.Timeout):
        consumer.receive(300)
    for closable in (theirs, consumer, our_reader):
        closable.close()


@pytest.mark.parametrize("batching", [False, True])
def test_wrong_key_discard_and_consume(
    ours: client.Client, keys: KeyFiles, other_keys: KeyFiles, batching: bool
) -> None:
    """A reader with the wrong private key: DISCARD acknowledges the entries (a later consumer
    with the right key sees nothing of them), CONSUME hands them out encrypted."""
    topic = topic_name()
    producer = ours.create_producer(
        topic,
        encryption_key=KEY,
        crypto_key_reader=client.CryptoKeyReader(*keys),
        batching_enabled=batching,
    )
    for i in range(3):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    wrong = client.CryptoKeyReader(*other_keys)
    consume = ours.subscribe(
        topic,
        "consume",
        initial_position=client.InitialPosition.Earliest,
        crypto_key_reader=wrong,
        crypto_failure_action=client.ConsumerCryptoFailureAction.CONSUME,
    )
    first = consume.receive(3000)
    context = first.encryption_context()
    assert context is not None
    assert context.is_decryption_failed()
    assert context.batch_size() == (3 if batching else -1)
    assert b"m-0" not in first.data()
    discard = ours.subscribe(
        topic,
        "discard",
        initial_position=client.InitialPosition.Earliest,
        crypto_key_reader=wrong,
        crypto_failure_action=client.ConsumerCryptoFailureAction.DISCARD,
    )
    with pytest.raises(client.Timeout):
        discard.receive(500)
    discard.close()
    producer.send(b"after")
    right = ours.subscribe(topic, "discard", crypto_key_reader=client.CryptoKeyReader(*keys))
    assert right.receive(3000).data() == b"after"
    for closable in (producer, consume, right):
        closable.close()
