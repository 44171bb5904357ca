"""Our producer and consumer with encryption, on a real broker: what the broker stores is
encrypted, and what cannot be encrypted fails the send with ``CryptoError``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

import client
from tests.client.crypto.keys import write_rsa_pair
from tests.helpers import BrokerThread


def topic_name() -> str:
    return f"persistent://public/default/crypto-{uuid.uuid4().hex[:10]}"


def test_stored_entries_are_encrypted(running: BrokerThread, tmp_path: Path) -> None:
    keys = write_rsa_pair(tmp_path, "k")
    with client.Client(running.url) as c:
        topic = topic_name()
        plain_reader = c.create_reader(
            topic,
            client.MessageId.earliest,
            crypto_failure_action=client.ConsumerCryptoFailureAction.CONSUME,
        )
        consumer = c.subscribe(topic, "s", crypto_key_reader=client.CryptoKeyReader(*keys))
        producer = c.create_producer(
            topic, encryption_key="k", crypto_key_reader=client.CryptoKeyReader(*keys)
        )
        secret = b"the plaintext that must not be stored" * 4
        producer.send(secret)
        raw = plain_reader.read_next(3000)
        assert secret[:16] not in raw.data()
        assert len(raw.data()) == len(secret) + 16
        context = raw.encryption_context()
        assert context is not None
        assert context.is_decryption_failed()
        message = consumer.receive(3000)
        assert message.data() == secret
        assert str(message.message_id()) == str(raw.message_id())


def test_unreadable_public_key_fails_the_send(running: BrokerThread, tmp_path: Path) -> None:
    keys = write_rsa_pair(tmp_path, "k")
    with client.Client(running.url) as c:
        topic = topic_name()
        reader = client.CryptoKeyReader(str(tmp_path / "missing.pem"), keys.private)
        for batching in (False, True):
            producer = c.create_producer(
                topic, encryption_key="k", crypto_key_reader=reader, batching_enabled=batching
            )
            with pytest.raises(client.CryptoError):
                producer.send(b"x")
            producer.close()
        # Nothing was stored: a reader from the start finds no message.
        plain = c.create_reader(topic, client.MessageId.earliest)
        assert not plain.has_message_available()


async def test_the_asyncio_api_encrypts_and_decrypts(running: BrokerThread, tmp_path: Path) -> None:
    """``client.asyncio`` passes ``encryption_key``, ``crypto_key_reader`` and
    ``crypto_failure_action`` through, as ``pulsar.asyncio`` does."""
    from client.asyncio import Client as AsyncioClient

    keys = write_rsa_pair(tmp_path, "k")
    c = AsyncioClient(running.url)
    try:
        topic = topic_name()
        consumer = await c.subscribe(topic, "s", crypto_key_reader=client.CryptoKeyReader(*keys))
        raw = await c.subscribe(
            topic,
            "raw",
            crypto_failure_action=client.ConsumerCryptoFailureAction.CONSUME,
        )
        producer = await c.create_producer(
            topic, encryption_key="k", crypto_key_reader=client.CryptoKeyReader(*keys)
        )
        await producer.send(b"async secret")
        await producer.flush()
        message = await asyncio.wait_for(consumer.receive(), 5)
        assert message.data() == b"async secret"
        context = message.encryption_context()
        assert context is not None
        assert not context.is_decryption_failed()
        undecrypted = await asyncio.wait_for(raw.receive(), 5)
        assert undecrypted.data() != b"async secret"
        undecrypted_context = undecrypted.encryption_context()
        assert undecrypted_context is not None
        assert undecrypted_context.is_decryption_failed()
    finally:
        await c.close()
