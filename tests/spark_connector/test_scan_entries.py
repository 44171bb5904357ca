"""``iter_range_entries`` keeps ``iter_range``'s rules: the end's entry stops the read, a range
the partition no longer holds is data loss, a start entry that is gone is data loss; with
``failOnDataLoss=false`` the same messages come as from ``iter_range``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client.message import Message
from client.message_id import MessageId
from client.raw_entry import RawEntry
from client.sync import Client
from protocol.batch import split_batch
from spark_connector.positions import Position
from spark_connector.scan import DataLoss, iter_range, iter_range_entries
from tests.helpers import BrokerThread

TOPIC = "persistent://public/default/scanned"


def payloads(entries: Iterator[tuple[RawEntry, list[int]]]) -> list[bytes]:
    out: list[bytes] = []
    for entry, taken in entries:
        if entry.is_batch:
            records = split_batch(entry.payload, entry.count)
            out += [records[index][1] for index in taken]
        else:
            out.append(entry.payload)
    return out


def data(messages: Iterator[Message]) -> list[bytes]:
    return [message.data() for message in messages]


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[Client]:
    client = Client(broker.url)
    producer = client.create_producer(
        TOPIC, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=60_000
    )
    for i in range(7):  # entries of 3, 3 and 1 messages
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    producer.close()
    try:
        yield client
    finally:
        client.close()


def ledger_of(client: Client) -> int:
    reader = client.create_reader(TOPIC, MessageId.earliest)
    try:
        return reader.get_last_message_id().ledger_id()
    finally:
        reader.close()


def both(client: Client, start: Position, end: Position, fail: bool) -> list[list[bytes]]:
    """What ``iter_range`` and ``iter_range_entries`` read of ``[start, end)``."""
    arguments = {"fail_on_data_loss": fail, "poll_timeout_ms": 300}
    return [
        data(iter_range(client, TOPIC, start, end, **arguments)),  # type: ignore[arg-type]
        payloads(iter_range_entries(client, TOPIC, start, end, **arguments)),  # type: ignore[arg-type]
    ]


def test_ranges_inside_batches(client: Client) -> None:
    ledger = ledger_of(client)
    for start, end, expected in [
        ((ledger, 0, 1), (ledger, 1, 2), [b"m1", b"m2", b"m3", b"m4"]),
        ((ledger, 0, 0), (ledger, 2, 1), [f"m{i}".encode() for i in range(7)]),
        ((ledger, 1, 3), (ledger, 2, 0), []),
    ]:
        assert both(client, Position(*start), Position(*end), True) == [expected, expected]


def test_a_range_the_partition_no_longer_holds(client: Client) -> None:
    ledger = ledger_of(client)
    beyond = Position(ledger, 9, 0)
    with pytest.raises(DataLoss, match="failOnDataLoss"):
        list(
            iter_range_entries(
                client,
                TOPIC,
                Position(ledger, 0, 0),
                beyond,
                fail_on_data_loss=True,
                poll_timeout_ms=300,
            )
        )
    every = [f"m{i}".encode() for i in range(7)]
    assert both(client, Position(ledger, 0, 0), beyond, False) == [every, every]


def test_a_start_entry_that_is_gone(client: Client) -> None:
    ledger = ledger_of(client)
    gone = Position(ledger - 1, 4, 0)  # an entry of an earlier ledger: not there any more
    end = Position(ledger, 1, 3)
    with pytest.raises(DataLoss, match="is gone"):
        list(
            iter_range_entries(
                client, TOPIC, gone, end, fail_on_data_loss=True, poll_timeout_ms=300
            )
        )
    first_six = [f"m{i}".encode() for i in range(6)]
    assert both(client, gone, end, False) == [first_six, first_six]
