"""early_producer: created on the first row, taken for its target, errors raised at take,
closed when unused (real broker)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from client.errors import ProducerBusy
from client.sync import Client, Producer
from spark_connector.early_producer import EarlyProducer
from tests.helpers import BrokerThread

EMPTY = pa.record_batch([pa.array([], pa.binary())], names=["value"])
ROWS = pa.record_batch([pa.array([b"a", b"b"], pa.binary())], names=["value"])


class Opener:
    """Creates ``name`` on ``topic``, recording the thread it ran on."""

    def __init__(self, client: Client, topic: str, name: str) -> None:
        self.client, self.topic, self.name = client, topic, name
        self.threads: list[threading.Thread] = []

    def __call__(self) -> tuple[str, Producer]:
        self.threads.append(threading.current_thread())
        return self.topic, self.client.create_producer(self.topic, producer_name=self.name)


def drain(batches: Iterator[pa.RecordBatch]) -> int:
    return sum(batch.num_rows for batch in batches)


def test_created_on_a_helper_thread_when_the_first_row_arrives(broker: BrokerThread) -> None:
    client = Client(broker.url)
    try:
        opener = Opener(client, "early-a", "early-a-0")
        early = EarlyProducer(opener)
        assert drain(early.watch(iter([EMPTY, EMPTY]))) == 0
        assert early.take("early-a") is None  # an empty task creates nothing
        assert opener.threads == []

        early = EarlyProducer(opener)
        assert drain(early.watch(iter([EMPTY, ROWS, ROWS]))) == 4
        early.wait()
        assert opener.threads
        assert opener.threads[0] is not threading.current_thread()
        producer = early.take("early-a")
        assert producer is not None
        assert producer.producer_name() == "early-a-0"
        assert producer.last_sequence_id() == -1
        producer.send(b"x", sequence_id=7)
        assert len(opener.threads) == 1  # started once for the whole task
        early.discard()  # taken: not closed by the writer's cleanup
        assert producer.is_connected()
        producer.close()
    finally:
        client.close()


def test_another_target_or_no_take_closes_it(broker: BrokerThread) -> None:
    client = Client(broker.url)
    try:
        early = EarlyProducer(Opener(client, "early-b", "early-b-0"))
        early.start()
        assert early.take("early-b-partition-1") is None
        # Closed: the name is free again at once.
        client.create_producer("early-b", producer_name="early-b-0").close()

        made: list[Producer] = []

        def opener() -> tuple[str, Producer]:
            topic, producer = Opener(client, "early-b", "early-b-0")()
            made.append(producer)
            return topic, producer

        early = EarlyProducer(opener)
        early.start()
        early.discard()  # the task failed before sending: closed unused
        assert not made[0].is_connected()
        client.create_producer("early-b", producer_name="early-b-0").close()
    finally:
        client.close()


def test_a_creation_error_is_raised_when_taken(broker: BrokerThread) -> None:
    client = Client(broker.url)
    try:
        zombie = client.create_producer("early-c", producer_name="early-c-0")
        early = EarlyProducer(Opener(client, "early-c", "early-c-0"))
        early.start()
        with pytest.raises(ProducerBusy):
            early.take("early-c")
        early.discard()  # nothing left to close
        zombie.close()
        nothing = EarlyProducer(lambda: None)  # several targets: none made early
        nothing.start()
        assert nothing.take("early-c") is None
    finally:
        client.close()
