"""``TargetBatch``: rows fed in any chunking leave as the same batch entries (same rows, same
first and highest sequence ids), one range or index lists alike, against a real broker."""

from __future__ import annotations

import itertools
import uuid

import pyarrow as pa

from client.message_id import MessageId
from client.sync import Client
from spark_connector.batches import BatchCutter
from spark_connector.rows import Columns
from spark_connector.sink_send import Receipts, TargetBatch
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
