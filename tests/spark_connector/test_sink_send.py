"""``TargetBatch``: rows fed in any chunking leave as the same batch entries (same rows, same
first and highest sequence ids), one range or index lists alike, and batches sent several per
call leave as the entries one call per batch makes, against a real broker."""

from __future__ import annotations

import itertools
import uuid
from typing import Any, cast

import pyarrow as pa

from client.message_id import MessageId
from client.sync import Client, Producer
from spark_connector.batches import BatchCutter
from spark_connector.rows import Columns
from spark_connector.sink_send import GROUP_BATCHES, Receipts, TargetBatch
from tests.helpers import BrokerThread

PLAN = {"value": 0, "key": 1, "eventTime": 2}
ROWS = 500


def chunk(first: int, stop: int) -> Columns:
    values = [b"v%05d" % i + b"." * (i % 40) for i in range(first, stop)]
    keys = [None if i % 3 else f"k{i}" for i in range(first, stop)]
    events = [1_000_000 + i for i in range(first, stop)]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(values, pa.binary()),
            pa.array(keys, pa.string()),
            pa.array(events, pa.timestamp("ms")),
        ],
        names=["value", "key", "eventTime"],
    )
    return Columns(batch, PLAN)


def stored(client: Client, topic: str) -> list[tuple[int, int, bytes, str, int]]:
    """(entry, sequence id, value, key, event time) of every message on ``topic``."""
    reader = client.create_reader(topic, MessageId.earliest)
    out = []
    while reader.has_message_available():
        m = reader.read_next(5000)
        out.append(
            (
                m.message_id().entry_id(),
                m.sequence_id(),
                m.data(),
                m.partition_key(),
                m.event_timestamp(),
            )
        )
    reader.close()
    return out


def write(
    client: Client, bounds: list[int], as_lists: bool
) -> list[tuple[int, int, bytes, str, int]]:
    topic = f"persistent://public/default/send-{uuid.uuid4().hex[:10]}"
    producer = client.create_producer(topic, producer_name=f"t-{uuid.uuid4().hex[:6]}")
    receipts = Receipts()
    target = TargetBatch(producer, BatchCutter(64, 2000), receipts)
    for first, stop in itertools.pairwise(bounds):
        columns = chunk(first, stop)
        rows = list(range(columns.count)) if as_lists else range(columns.count)
        target.feed(columns, rows, (7 << 32) + first)
    target.send()
    producer.flush()
    producer.close()
    assert receipts.error is None
    assert receipts.stored == ROWS
    return stored(client, topic)


def test_any_chunking_sends_the_same_entries(broker: BrokerThread) -> None:
    with Client(broker.url) as client:
        whole = write(client, [0, ROWS], as_lists=False)
        assert [s for _, s, *_ in whole] == [(7 << 32) + i for i in range(ROWS)]
        assert len({entry for entry, *_ in whole}) > ROWS // 64  # cut by bytes too
        assert whole[4][2:] == (b"v00004" + b"." * 4, "", 1_000_004)
        assert write(client, [0, 3, 64, 65, 300, 301, ROWS], as_lists=False) == whole
        assert write(client, [0, 100, 250, ROWS], as_lists=True) == whole


class CountingProducer:
    """A real producer whose ``send_rows`` calls are counted (row counts per call)."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.calls: list[int] = []

    def send_rows(self, payloads: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(len(payloads))
        return self.producer.send_rows(payloads, *args, **kwargs)


def write_grouped(
    client: Client, values: list[bytes], group: int, cuts: tuple[int, int], chunks: int
) -> tuple[list[tuple[int, int, bytes, str, int]], list[int]]:
    """``values`` (keys on every fifth row) through a ``TargetBatch`` grouping at most
    ``group`` batches per call, fed in ``chunks`` chunks: what is stored, and the calls."""
    topic = f"persistent://public/default/group-{uuid.uuid4().hex[:10]}"
    producer = client.create_producer(
        topic, producer_name=f"t-{uuid.uuid4().hex[:6]}", block_if_queue_full=True
    )
    counting = CountingProducer(producer)
    receipts = Receipts()
    target = TargetBatch(cast(Producer, counting), BatchCutter(*cuts), receipts, group)
    keys = [f"k{i}" if i % 5 == 0 else None for i in range(len(values))]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(values, pa.binary()), pa.array(keys, pa.string())], names=["value", "key"]
    )
    step = -(-len(values) // chunks)
    for first in range(0, len(values), step):
        columns = Columns(batch.slice(first, step), {"value": 0, "key": 1})
        target.feed(columns, range(columns.count), (3 << 32) + first)
    target.send()
    producer.flush()
    producer.close()
    assert receipts.error is None
    assert receipts.stored == len(values)
    return stored(client, topic), counting.calls


def test_batches_of_one_length_share_a_call_and_leave_as_the_same_entries(
    broker: BrokerThread,
) -> None:
    uniform = [b"%07d" % i + b"u" * 93 for i in range(2000)]  # 100 B rows: one batch length
    with Client(broker.url) as client:
        alone, calls_alone = write_grouped(client, uniform, 1, (100, 1 << 20), 3)
        grouped, calls = write_grouped(client, uniform, GROUP_BATCHES, (100, 1 << 20), 3)
        assert grouped == alone  # same entries, sequence ids, values, keys
        assert len({entry for entry, *_ in grouped}) == 20  # 20 batches of 100 rows
        assert calls_alone == [100] * 20
        assert calls == [800, 800, 400]  # groups of GROUP_BATCHES batches, then the rest


def test_a_batch_of_another_length_ends_the_group(broker: BrokerThread) -> None:
    # Byte cuts on rows of varying size: batches of several lengths, in runs.
    mixed = [b"%05d" % i + b"m" * (i // 150 * 40) for i in range(1500)]
    with Client(broker.url) as client:
        alone, calls_alone = write_grouped(client, mixed, 1, (64, 3000), 4)
        grouped, calls = write_grouped(client, mixed, GROUP_BATCHES, (64, 3000), 4)
        assert grouped == alone
        lengths = [
            sum(1 for e, *_ in alone if e == entry) for entry in sorted({e for e, *_ in alone})
        ]
        assert len(set(lengths)) > 3  # the rows made batches of several lengths
        assert calls_alone == lengths
        assert len(calls) < len(lengths) // 2
        assert sum(calls) == len(mixed)


def test_send_complete_keeps_the_batch_in_progress(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/held-{uuid.uuid4().hex[:10]}"
    with Client(broker.url) as client:
        producer = client.create_producer(topic, producer_name=f"t-{uuid.uuid4().hex[:6]}")
        receipts = Receipts()
        target = TargetBatch(producer, BatchCutter(64, 1 << 20), receipts)
        target.feed(chunk(0, 150), range(150), 9 << 32)  # two batches of 64, 22 rows pending
        target.send_complete()
        producer.flush()
        assert receipts.stored == 128  # only whole batches leave (a failing task stops here)
        target.feed(chunk(150, 200), range(50), (9 << 32) + 150)
        target.send()
        producer.flush()
        producer.close()
        assert receipts.stored == 200
        assert [s for _, s, *_ in stored(client, topic)] == [(9 << 32) + i for i in range(200)]
