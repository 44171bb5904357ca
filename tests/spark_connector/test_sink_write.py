"""The sink's task write loop against a real broker, outside Spark (no ``TaskContext``: batch id
0, the ``writeId`` names the producers): column-wise rows, order-free numbering, compression,
cached at-least-once producers."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from spark_connector.options import OptionError, SinkOptions
from spark_connector.producer_cache import shared_producers
from spark_connector.sink import BatchWriter, SinkCommit
from tests.helpers import BrokerThread, wait_until
from tests.spark_connector.helpers import consume_all

SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
    ]
)


def rows(count: int) -> list[tuple[bytes, str | None, list[tuple[str, str]] | None]]:
    return [
        (
            b"%06d" % i + b"y" * 94,
            f"k{i % 5}" if i % 3 else None,
            [("i", str(i))] if i % 4 else None,
        )
        for i in range(count)
    ]


def batches(data: list[Any], size: int = 250) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(data), size):
        value, key, props = zip(*data[start : start + size], strict=True)
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.array(value, pa.binary()), pa.array(key), pa.array(props, SCHEMA[2].type)],
                schema=SCHEMA,
            )
        )
    return out


def write(url: str, topic: str, data: list[Any], **options: str) -> SinkCommit:
    parsed = SinkOptions.parse({"service.url": url, "topic": topic, **options})
    return BatchWriter(parsed, {"value": 0, "key": 1, "properties": 2}).write(iter(batches(data)))


def stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{broker.http}/admin/v2/{path}/stats", timeout=10) as answer:
        found: dict[str, Any] = json.load(answer)
    return found


def storage_size(broker: BrokerThread, topic: str) -> int:
    size: int = stats(broker, topic)["storageSize"]
    return size


def publishers(broker: BrokerThread, topic: str) -> list[str]:
    """The names of ``topic``'s producers (none while the topic does not exist yet)."""
    try:
        found = stats(broker, topic)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        return []
    return [p["producerName"] for p in found["publishers"]]


def test_any_arrival_order_numbers_the_rows_alike(broker: BrokerThread) -> None:
    """A second attempt with the rows in another order stores nothing new: every sequence id
    names the same row (the in-memory Arrow sort), so all are duplicates."""
    topic = "persistent://public/default/order-free"
    data = rows(3000)
    first = write(broker.url, topic, data, writeId="w1", batchingMaxMessages="100")
    assert (first.rows, first.stored, first.duplicates) == (3000, 3000, 0)
    shuffled = data[:]
    random.Random(3).shuffle(shuffled)
    again = write(broker.url, topic, shuffled, writeId="w1", batchingMaxMessages="100")
    assert (again.rows, again.stored, again.duplicates) == (3000, 0, 3000)
    stored = consume_all(broker.url, topic)
    assert sorted(m.value for m in stored) == sorted(v for v, _, _ in data)
    by_value = {m.value: m for m in stored}
    for value, key, props in data:
        assert by_value[value].key == (key.encode() if key else None)
        assert dict(by_value[value].properties) == dict(props or [])


def test_spilled_sort_numbers_the_rows_alike(broker: BrokerThread) -> None:
    """Past ``exactlyOnce.sortBufferBytes`` the sort spills; the numbering stays the same."""
    topic = "persistent://public/default/order-free-spilled"
    data = rows(1200)
    write(broker.url, topic, data, writeId="w2")
    shuffled = data[:]
    random.Random(5).shuffle(shuffled)
    again = write(
        broker.url, topic, shuffled, writeId="w2", **{"exactlyOnce.sortBufferBytes": "20000"}
    )
    assert (again.stored, again.duplicates) == (0, 1200)


@pytest.mark.parametrize("codec", ["lz4", "zlib", "zstd", "snappy"])
def test_compression(broker: BrokerThread, codec: str) -> None:
    plain, packed = (f"persistent://public/default/c-{codec}-{n}" for n in ("none", "packed"))
    data = rows(2000)
    write(broker.url, plain, data, exactlyOnce="true")
    write(broker.url, packed, data, exactlyOnce="false", compressionType=codec.upper())
    assert sorted(m.value for m in consume_all(broker.url, packed)) == [v for v, _, _ in data]
    # Rows of 100 bytes that differ in 6: the batches shrink to a fraction.
    assert storage_size(broker, packed) < storage_size(broker, plain) / 2


def test_unknown_compression_is_refused() -> None:
    with pytest.raises(OptionError, match="compressionType"):
        SinkOptions.parse({"service.url": "pulsar://x:1", "compressionType": "brotli"})
    parsed = SinkOptions.parse(
        {"service.url": "pulsar://x:1", "pulsar.producer.compressionType": "ZSTD"}
    )
    assert parsed.compression_type == "zstd"


def test_at_least_once_producers_outlive_the_task(broker: BrokerThread) -> None:
    topic = "persistent://public/default/cached"
    shared_producers.close()
    write(broker.url, topic, rows(10), exactlyOnce="false")
    assert len(shared_producers) == 1  # handed back, not closed
    write(broker.url, topic, rows(10), exactlyOnce="false")
    assert len(shared_producers) == 1  # the second task took it and gave it back
    write(broker.url, topic, rows(10), exactlyOnce="true", writeId="named")
    assert len(shared_producers) == 1  # exactly-once producers are the task's own
    assert len(consume_all(broker.url, topic)) == 30
    shared_producers.close()
    assert len(shared_producers) == 0


def test_the_producer_is_created_while_the_rows_arrive(broker: BrokerThread) -> None:
    """Exactly-once: the named producer exists before the task's last row has arrived (its
    creation is off the path between the last row and the first send); an empty task creates
    none; a task failing while its rows arrive lets the name go (the next attempt gets it)."""
    topic = "persistent://public/default/early"
    name = "spark-early-0"
    parsed = SinkOptions.parse(
        {
            "service.url": broker.url,
            "topic": topic,
            "writeId": "early",
            "producerBusyTimeoutMs": "0",
        }
    )
    plan = {"value": 0, "key": 1, "properties": 2}
    seen: list[list[str]] = []

    def arriving(fail: bool) -> Iterator[pa.RecordBatch]:
        parts = batches(rows(500))
        yield from parts[:-1]
        wait_until(lambda: publishers(broker, topic) == [name], timeout=10)
        seen.append(publishers(broker, topic))
        if fail:
            raise RuntimeError("the input failed")
        yield parts[-1]

    with pytest.raises(RuntimeError, match="the input failed"):
        BatchWriter(parsed, plan).write(arriving(fail=True))
    assert publishers(broker, topic) == []
    empty = BatchWriter(parsed, plan).write(iter([batches(rows(1))[0].slice(0, 0)]))
    assert (empty.rows, empty.producer) == (0, name)
    assert publishers(broker, topic) == []  # no producer was created for it
    done = BatchWriter(parsed, plan).write(arriving(fail=False))
    assert (done.rows, done.stored, done.producer) == (500, 500, name)
    assert seen == [[name], [name]]
    assert publishers(broker, topic) == []  # closed at the end of the task
