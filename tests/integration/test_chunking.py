"""Issue #10 item 3: chunked messages (PIP-37) with dedup on and off, and a chunked message
resent after a SIGKILL is stored once and delivered exactly once."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from protocol import commands, pb
from protocol.metadata import encode_entry
from tests.helpers import BrokerProcess, BrokerThread, broker_config, close_client, new_client
from tests.raw_client import RawConnection, T, send_outcomes

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TEN_MIB = 10 * 1024 * 1024


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup-on", "dedup-off"])
def test_official_client_chunks_a_10_mib_message(tmp_path: Path, dedup: bool) -> None:
    """The official client's own chunking scenario: one 10 MiB message, chunking on."""
    running = BrokerThread(
        broker_config(tmp_path / "data", broker_deduplication_enabled=dedup)
    ).start()
    client = new_client(running.url)
    try:
        topic = f"persistent://public/default/chunks-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic, producer_name="chunker", chunking_enabled=True, batching_enabled=False
        )
        payload = os.urandom(TEN_MIB)
        producer.send(payload)
        producer.send(b"small")
        message = consumer.receive(10_000)
        assert message.data() == payload
        consumer.acknowledge(message)
        assert consumer.receive(10_000).data() == b"small"
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == payload
    finally:
        close_client(client)
        running.stop()


def _chunk(name: str, seq: int, chunk_id: int, chunks: list[bytes], publish_time: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name=name,
        sequence_id=seq,
        publish_time=publish_time,
        uuid=f"{name}-{seq}",
        num_chunks_from_msg=len(chunks),
        total_chunk_msg_size=sum(len(c) for c in chunks),
        chunk_id=chunk_id,
    )
    return commands.send(1, seq, encode_entry(metadata, chunks[chunk_id]), is_chunk=True)


def _send_chunks(port: int, chunk_ids: list[int], chunks: list[bytes], when: int) -> list:
    with RawConnection(port) as conn:
        conn.handshake()
        conn.create_producer("persistent://public/default/resent", 1, "raw-chunker")
        last_sequence_id = conn.of_type(T.PRODUCER_SUCCESS)[0].command.producer_success
        for chunk_id in chunk_ids:
            conn.send(_chunk("raw-chunker", 5, chunk_id, chunks, when))
        conn.read_until(lambda f: len(send_outcomes(conn)) == len(chunk_ids))
        return [last_sequence_id.last_sequence_id, *[o[1] for o in send_outcomes(conn)]]


@pytest.mark.slow
def test_a_chunked_message_resent_after_sigkill_is_delivered_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        # 1. The official client: a whole 10 MiB message, then the broker is killed; the
        #    application resends it with the same id after the restart.
        client = new_client(broker.url)
        topic = "persistent://public/default/resent-whole"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic, producer_name="app", chunking_enabled=True, batching_enabled=False
        )
        payload = os.urandom(TEN_MIB)
        producer.send(payload, sequence_id=1)
        broker.kill()
        close_client(client)
        broker.restart()
        client = new_client(broker.url)
        producer = client.create_producer(
            topic, producer_name="app", chunking_enabled=True, batching_enabled=False
        )
        assert producer.last_sequence_id() == 1
        producer.send(payload, sequence_id=1)  # every chunk is a duplicate now
        producer.send(b"next", sequence_id=2)
        consumer = client.subscribe(topic, "sub")
        first = consumer.receive(10_000)
        assert first.data() == payload
        consumer.acknowledge(first)
        assert consumer.receive(10_000).data() == b"next"
        close_client(client)

        # 2. Raw frames: chunks 0-1 of 3 are durable when the broker dies (their receipts may
        #    be lost); the resend of the whole message after the restart stores only chunk 2.
        chunks = [os.urandom(1000) for _ in range(3)]
        when = int(time.time() * 1000)
        client = new_client(broker.url)
        consumer = client.subscribe(
            "persistent://public/default/resent",
            "sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        before = _send_chunks(broker.port, [0, 1], chunks, when)
        assert before[0] == -1
        assert all(isinstance(o, str) and o != "-1:-1" for o in before[1:])
        broker.kill()
        close_client(client)
        broker.restart()
        after = _send_chunks(broker.port, [0, 1, 2], chunks, when)
        assert after[0] == -1  # the message is not complete: its id is not the mark yet
        assert after[1:3] == ["-1:-1", "-1:-1"]
        assert after[3] != "-1:-1"
        again = _send_chunks(broker.port, [0, 1, 2], chunks, when)
        assert again == [5, "-1:-1", "-1:-1", "-1:-1"]

        client = new_client(broker.url)
        consumer = client.subscribe("persistent://public/default/resent", "sub")
        message = consumer.receive(10_000)
        assert message.data() == b"".join(chunks)
        consumer.acknowledge(message)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1000)  # no partial or second copy follows
        close_client(client)
    finally:
        broker.kill()
