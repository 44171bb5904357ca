"""The columnar read path (``entry_columns`` through ``read_range``) gives exactly the rows of
the per-message path (``to_record_batch`` of ``iter_range``'s messages) on the same topic:
batched and unbatched entries, compressed, with keys, properties and event times, ranges that
start and end inside batches; and with ``includeHeaders``. No JVM: ``read_range`` is what an
executor's ``read`` runs."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from client import Client, CompressionType, MessageId
from client.message import Message
from spark_connector.headers import with_headers
from spark_connector.options import SourceOptions
from spark_connector.positions import EARLIEST, Position
from spark_connector.scan import iter_range
from spark_connector.source import TopicRange, read_range, to_record_batch
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration]


def publish(url: str, topic: str) -> None:
    """Entries of every kind, in this order: batches of 7 with keys, properties and event
    times (some records without), single messages, lz4 batches, zlib single messages."""
    client = Client(url)
    try:
        kinds = [
            (True, CompressionType.NONE, 40),
            (False, CompressionType.NONE, 5),
            (True, CompressionType.LZ4, 30),
            (False, CompressionType.ZLib, 4),
            (True, CompressionType.NONE, 3),
        ]
        number = 0
        for batched, compression, count in kinds:
            producer = client.create_producer(
                topic,
                batching_enabled=batched,
                batching_max_messages=7,
                batching_max_publish_delay_ms=60_000,
                compression_type=compression,
            )
            for _ in range(count):
                odd = number % 3 == 0
                producer.send_async(
                    f"value-{number}".encode() * (1 + number % 4),
                    None,
                    properties={"n": str(number), "k\u00e9": "v"} if odd else None,
                    partition_key=f"key-{number % 5}" if number % 2 else None,
                    event_timestamp=1_700_000_000_000 + number if number % 4 else None,
                )
                number += 1
            producer.flush()
            producer.close()
    finally:
        client.close()


def messages(url: str, topic: str, start: Position, end: Position) -> list[Message]:
    client = Client(url)
    try:
        return list(
            iter_range(client, topic, start, end, fail_on_data_loss=True, poll_timeout_ms=10_000)
        )
    finally:
        client.close()


def all_ids(url: str, topic: str) -> list[MessageId]:
    client = Client(url)
    try:
        reader = client.create_reader(topic, MessageId.earliest)
        ids = []
        while reader.has_message_available():
            ids.append(reader.read_next(10_000).message_id())
        return ids
    finally:
        client.close()


def columnar(options: SourceOptions, part: TopicRange, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(list(read_range(options, part)), schema=schema)


@pytest.fixture
def topic(broker: BrokerThread) -> str:
    name = f"persistent://public/default/columns-{uuid.uuid4().hex[:10]}"
    publish(broker.url, name)
    return name


def test_same_rows_as_the_message_path(broker: BrokerThread, topic: str) -> None:
    mid = all_ids(broker.url, topic)
    assert len(mid) == 82
    position = [Position.of_message(i.ledger_id(), i.entry_id(), i.batch_index()) for i in mid]
    after = [Position.after_message(i.ledger_id(), i.entry_id(), i.batch_index()) for i in mid]
    assert mid[3].batch_index() == 3
    assert mid[44].batch_index() == -1
    ranges = [
        (EARLIEST, after[-1]),  # everything
        (position[3], position[60]),  # from inside a batch to inside an lz4 batch
        (position[10], after[39]),  # to the last of a batch ...
        (position[7], position[42]),  # ... and to a single message
        (position[41], after[44]),  # single messages only
        (position[44], position[77]),  # singles, an lz4 batch, zlib singles
        (position[48], position[48]),  # empty
        (position[80], after[81]),  # the last batch's tail
    ]
    options = SourceOptions.parse({"service.url": broker.url, "topic": topic})
    for start, end in ranges:
        expected = to_record_batch(
            messages(broker.url, topic, start, end) if end > start else [], topic, 0
        )
        got = columnar(options, TopicRange(topic, 0, start, end), expected.schema)
        assert got.schema == expected.schema
        assert got.to_pylist() == expected.to_pylist(), (start, end)
        assert got.equals(pa.Table.from_batches([expected])), (start, end)


def test_same_headers_column(broker: BrokerThread, topic: str) -> None:
    every = all_ids(broker.url, topic)[-1]
    last = Position.after_message(every.ledger_id(), every.entry_id(), every.batch_index())
    expected = with_headers(to_record_batch(messages(broker.url, topic, EARLIEST, last), topic, 0))
    options = SourceOptions.parse(
        {"service.url": broker.url, "topic": topic, "includeHeaders": "true"}
    )
    got = columnar(options, TopicRange(topic, 0, EARLIEST, last), expected.schema)
    assert got.to_pylist() == expected.to_pylist()
