"""Decode the bytes the official client (pulsar-client 3.13.0, C++ core 4.2.0) really sends.

A throw-away fake broker on 127.0.0.1 answers with our builders just enough for the client to
create a producer and publish; the test then checks the decoded frames field by field. The
fake broker is test scaffolding (sockets + threads); the code under test is protocol/ only.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator

import pulsar
import pytest

from protocol import commands
from protocol.batch import decode_batch
from protocol.framing import Frame, FrameDecoder
from protocol.ids import MessageId
from protocol.metadata import decode_entry, parse_entry_metadata

pytestmark = pytest.mark.compat

T = commands.T
CLIENT_DEADLINE_S = 30.0
LEDGER = 7


class FakeBroker:
    """Answers CONNECT, PARTITIONED_METADATA, LOOKUP, PRODUCER, SEND, CLOSE_* and PING."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"pulsar://127.0.0.1:{self._listener.getsockname()[1]}"
        self.frames: list[Frame] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next_entry = 0
        self._replies: dict[int, Callable[[Frame], bytes | None]] = {
            T.CONNECT: self._on_connect,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SEND: self._on_send,
            T.CLOSE_PRODUCER: lambda f: commands.success(f.command.close_producer.request_id),
            T.CLOSE_CONSUMER: lambda f: commands.success(f.command.close_consumer.request_id),
            T.PING: lambda f: commands.pong(),
        }

    def start(self) -> None:
        self._spawn(self._accept_loop)

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._listener.close()

    def of_type(self, command_type: int) -> list[Frame]:
        with self._lock:
            return [frame for frame in self.frames if frame.type == command_type]

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self._spawn(self._serve, connection)

    def _serve(self, connection: socket.socket) -> None:
        decoder = FrameDecoder()
        connection.settimeout(0.1)
        with connection:
            while not self._stopping.is_set():
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                try:
                    decoder.feed(data)
                    for frame in decoder:
                        self._handle(connection, frame)
                except Exception as exc:  # surfaced by the test, not swallowed
                    self.errors.append(exc)
                    return

    def _handle(self, connection: socket.socket, frame: Frame) -> None:
        with self._lock:
            self.frames.append(frame)
        handler = self._replies.get(frame.type)
        reply = handler(frame) if handler is not None else None
        if reply is not None:
            connection.sendall(reply)

    def _on_connect(self, frame: Frame) -> bytes:
        version = min(frame.command.connect.protocol_version, commands.PROTOCOL_VERSION)
        return commands.connected("Magnetar-test", protocol_version=version)

    def _on_partitioned_metadata(self, frame: Frame) -> bytes:
        return commands.partitioned_metadata_response(frame.command.partitionMetadata.request_id)

    def _on_lookup(self, frame: Frame) -> bytes:
        request_id = frame.command.lookupTopic.request_id
        return commands.lookup_response(request_id, self.url, proxy_through_service_url=True)

    def _on_producer(self, frame: Frame) -> bytes:
        request = frame.command.producer
        name = request.producer_name or f"generated-{request.producer_id}"
        return commands.producer_success(request.request_id, name)

    def _on_send(self, frame: Frame) -> bytes:
        send = frame.command.send
        with self._lock:
            entry_id, self._next_entry = self._next_entry, self._next_entry + 1
        return commands.send_receipt(
            send.producer_id, send.sequence_id, MessageId(LEDGER, entry_id)
        )


@pytest.fixture(scope="module")
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker()
    fake.start()
    yield fake
    fake.stop()


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("test_real_client_bytes.pulsar")
    logger.setLevel(logging.ERROR)
    return logger


def _drive_client(url: str, results: dict[str, object]) -> None:
    client = pulsar.Client(
        url,
        operation_timeout_seconds=10,
        connection_timeout_ms=5000,
        logger=_quiet_logger(),
    )
    try:
        single = client.create_producer("my-topic", producer_name="prod-a", batching_enabled=False)
        results["single_id"] = single.send(
            b"hello", properties={"colour": "blue"}, partition_key="key-1"
        )
        batched = client.create_producer(
            "my-topic",
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=60_000,
        )
        for index in range(3):
            batched.send_async(f"b-{index}".encode(), callback=lambda result, msg_id: None)
        batched.flush()
        single.close()
        batched.close()
    except BaseException as exc:
        results["error"] = exc
    finally:
        client.close()
        results["done"] = True


@pytest.fixture(scope="module")
def session(broker: FakeBroker) -> FakeBroker:
    results: dict[str, object] = {}
    thread = threading.Thread(target=_drive_client, args=(broker.url, results), daemon=True)
    thread.start()
    thread.join(timeout=CLIENT_DEADLINE_S)
    assert not thread.is_alive(), "pulsar client did not finish in time"
    assert "error" not in results, results.get("error")
    assert broker.errors == []
    single_id = results["single_id"]
    assert (single_id.ledger_id(), single_id.entry_id()) == (LEDGER, 0)  # type: ignore[attr-defined]
    return broker


def test_connect(session: FakeBroker) -> None:
    [frame] = session.of_type(T.CONNECT)[:1]
    connect = frame.command.connect
    assert connect.client_version == "Pulsar-CPP-v4.2.0"
    assert connect.protocol_version == 20
    assert connect.auth_method_name == "none"
    assert connect.feature_flags.supports_broker_entry_metadata
    assert frame.entry is None


def test_lookups_use_full_topic_names(session: FakeBroker) -> None:
    topic = "persistent://public/default/my-topic"
    metadata_requests = session.of_type(T.PARTITIONED_METADATA)
    lookups = session.of_type(T.LOOKUP)
    assert metadata_requests
    assert lookups
    assert {f.command.partitionMetadata.topic for f in metadata_requests} == {topic}
    assert {f.command.lookupTopic.topic for f in lookups} == {topic}
    assert not lookups[0].command.lookupTopic.authoritative


def test_producers(session: FakeBroker) -> None:
    producers = [frame.command.producer for frame in session.of_type(T.PRODUCER)]
    assert len(producers) == 2
    named, generated = producers
    assert named.producer_name == "prod-a"
    assert named.user_provided_producer_name
    assert named.topic == "persistent://public/default/my-topic"
    assert not generated.HasField("producer_name")
    assert not generated.user_provided_producer_name
    assert named.producer_id != generated.producer_id


def test_single_send(session: FakeBroker) -> None:
    named_id = session.of_type(T.PRODUCER)[0].command.producer.producer_id
    [frame] = [f for f in session.of_type(T.SEND) if f.command.send.producer_id == named_id]
    assert frame.command.send.sequence_id == 0
    assert not frame.command.send.HasField("num_messages")
    assert frame.has_checksum
    assert frame.checksum_valid
    assert frame.entry is not None
    facts = parse_entry_metadata(frame.entry)
    assert facts.producer_name == "prod-a"
    assert facts.sequence_id == 0
    assert not facts.is_batch
    assert facts.num_messages == 1
    assert facts.partition_key == "key-1"
    metadata, payload = decode_entry(frame.entry)
    assert payload == b"hello"
    assert {kv.key: kv.value for kv in metadata.properties} == {"colour": "blue"}


def test_batched_send(session: FakeBroker) -> None:
    generated_id = session.of_type(T.PRODUCER)[1].command.producer.producer_id
    [frame] = [f for f in session.of_type(T.SEND) if f.command.send.producer_id == generated_id]
    send = frame.command.send
    assert send.sequence_id == 0
    assert send.num_messages == 3
    assert frame.checksum_valid
    assert frame.has_checksum
    assert frame.entry is not None
    facts = parse_entry_metadata(frame.entry)
    assert facts.is_batch
    assert facts.num_messages == 3
    assert facts.producer_name == "generated-" + str(generated_id)
    assert facts.highest_sequence_id is None  # C++ 4.2.0 never sets it
    messages = decode_batch(frame.entry[facts.payload_offset :], count=facts.num_messages)
    assert [m.payload for m in messages] == [b"b-0", b"b-1", b"b-2"]
    assert [m.sequence_id for m in messages] == [0, 1, 2]


def test_close_producers(session: FakeBroker) -> None:
    closes = [frame.command.close_producer for frame in session.of_type(T.CLOSE_PRODUCER)]
    producer_ids = {frame.command.producer.producer_id for frame in session.of_type(T.PRODUCER)}
    assert {close.producer_id for close in closes} == producer_ids
