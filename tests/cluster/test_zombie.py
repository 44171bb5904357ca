"""A zombie owner: SIGSTOP the owner mid-stream until another broker took its bundle over, let
writes pile up in its socket, SIGCONT it: nothing it accepts after the takeover is ever
acknowledged or visible, while the new owner's writes are."""

from __future__ import annotations

import asyncio
import signal
import time

import pulsar

from broker.cluster.bundles import bundle_of
from broker.cluster.membership import Keys
from broker.cluster.store import EtcdStore
from protocol import commands, pb
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName
from tests.cluster.conftest import Cluster, http_lookup_owner
from tests.helpers import close_client, new_client, wait_until
from tests.raw_client import RawConnection, RawSession

T = pb.BaseCommand.Type
TOPIC = "persistent://public/default/zombie"


def entry(seq: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="zombie-writer", sequence_id=seq, publish_time=int(time.time() * 1000)
    )
    return encode_entry(metadata, f"zombie-{seq}".encode())


def receipts(conn: RawConnection) -> set[int]:
    return {f.command.send_receipt.sequence_id for f in conn.of_type(T.SEND_RECEIPT)}


def settled(conn: RawConnection, seqs: range) -> bool:
    """The zombie answered each late SEND with an error, or dropped the producer."""
    errors = {f.command.send_error.sequence_id for f in conn.of_type(T.SEND_ERROR)}
    return set(seqs) <= errors | receipts(conn) or bool(conn.of_type(T.CLOSE_PRODUCER))


def writer_with_five_receipts(port: int, topic: str) -> RawConnection:
    """A raw producer ("zombie-writer", id 1) on the broker at ``port`` whose sequence ids 1-5
    are acknowledged: the owner is serving before it is paused."""
    conn = RawConnection(port)
    conn.handshake()
    conn.create_producer(topic, 1, "zombie-writer")
    for seq in range(1, 6):
        conn.send(commands.send(1, seq, entry(seq)))
    conn.read_until(lambda _frames: receipts(conn) == {1, 2, 3, 4, 5})
    return conn


def test_a_paused_owner_never_acknowledges_nor_exposes_writes_after_takeover(
    cluster: Cluster,
) -> None:
    zombie = cluster.by_url(http_lookup_owner(cluster.brokers[0].web_port, TOPIC))
    others = [b for b in cluster.brokers if b is not zombie]
    conn = writer_with_five_receipts(zombie.port, TOPIC)
    assert zombie.proc is not None
    zombie.proc.send_signal(signal.SIGSTOP)
    late = range(6, 16)
    try:
        wait_until(
            lambda: http_lookup_owner(others[0].web_port, TOPIC) != zombie.url,
            30,
            lambda: "no takeover while the owner was stopped",
        )
        owner = http_lookup_owner(others[0].web_port, TOPIC)
        client = new_client(owner)
        try:
            successor = client.create_producer(TOPIC, producer_name="successor")
            for index in range(10):
                successor.send(f"successor-{index}".encode())
        finally:
            close_client(client)
        for seq in late:  # queued in the stopped broker's socket
            conn.send(commands.send(1, seq, entry(seq)))
    finally:
        zombie.proc.send_signal(signal.SIGCONT)

    try:
        conn.read_until(lambda _frames: settled(conn, late), timeout=20)
    except ConnectionError:
        pass  # the zombie dropped the connection: also no receipt
    assert receipts(conn) == {1, 2, 3, 4, 5}
    conn.close()

    expected = [*(f"zombie-{s}".encode() for s in range(1, 6))]
    expected += [f"successor-{i}".encode() for i in range(10)]
    assert read_everything(cluster.brokers[0].url) == expected
    # The zombie serves the topic no more: it answers lookups with the new owner.
    assert http_lookup_owner(zombie.web_port, TOPIC) == owner
    # Still invisible after the bundle moves again (its late bytes lie past the sealed end).
    owner_process = cluster.by_url(owner)
    owner_process.kill()
    assert read_everything(cluster.service_url) == expected  # the live brokers only


def read_everything(url: str, topic: str = TOPIC) -> list[bytes]:
    client = new_client(url, operation_timeout=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        close_client(client)


def delete_ownership_key(cluster: Cluster, topic: str) -> None:
    """Remove the bundle's ownership key behind its owner's back (as an operator could)."""
    bundle = bundle_of(TopicName.parse(topic), 4)

    async def delete() -> None:
        store = EtcdStore(cluster.etcd.url, timeout_seconds=5)
        await store.connect()
        try:
            await store.delete(Keys(cluster.name).owner(bundle))
        finally:
            await store.close()

    asyncio.run(delete())


def test_an_owner_fenced_through_the_file_acknowledges_nothing_more(cluster: Cluster) -> None:
    """The owner is paused only briefly (its lease still valid when it resumes) while its key is
    deleted and another broker takes the topic: the new owner's fence file (or the key check at
    the next lease refresh, whichever comes first) stops it; nothing late is acknowledged."""
    topic = "persistent://public/default/fenced-by-file"
    old = cluster.by_url(http_lookup_owner(cluster.brokers[0].web_port, topic))
    new = next(b for b in cluster.brokers if b is not old)
    conn = writer_with_five_receipts(old.port, topic)
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    late = range(6, 16)
    try:
        delete_ownership_key(cluster, topic)
        with RawSession(new.port) as session:  # the new owner acquires the bundle, loads it
            reply = session.request(commands.lookup(topic, 1, authoritative=True), 1)
            assert reply.command.lookupTopicResponse.brokerServiceUrl == new.url
            loaded = session.request(commands.producer(topic, 1, 2, producer_name="next"), 2)
            assert loaded.type == T.PRODUCER_SUCCESS
        for seq in late:
            conn.send(commands.send(1, seq, entry(seq)))
    finally:
        old.proc.send_signal(signal.SIGCONT)
    try:
        conn.read_until(lambda _frames: settled(conn, late), timeout=20)
    except ConnectionError:
        pass
    assert receipts(conn) == {1, 2, 3, 4, 5}
    conn.close()
    stored = read_everything(cluster.brokers[0].url, topic)
    assert stored == [f"zombie-{s}".encode() for s in range(1, 6)]
