"""The planner's probe and budget against a real broker (no JVM): positions from message ids,
seek by publish time, an entry past a ledger's end, fair ends over partitions and ledgers."""

from __future__ import annotations

import time
from pathlib import Path

from client.sync import Client
from spark_connector.budget import entries_between
from spark_connector.options import SourceOptions
from spark_connector.planner import Planner
from spark_connector.positions import EARLIEST, Position
from spark_connector.probe import Probe
from tests.helpers import BrokerThread, broker_config
from tests.spark_connector.helpers import Sent, produce

TOPIC = "persistent://public/default/probe"


def _ids(url: str, topic: str, count: int, prefix: str) -> list[tuple[int, int]]:
    client = Client(url)
    try:
        producer = client.create_producer(topic)
        out = []
        for i in range(count):
            mid = producer.send(f"{prefix}{i}".encode())
            out.append((mid.ledger_id(), mid.entry_id()))
        producer.close()
        return out
    finally:
        client.close()


def test_probe_positions_and_time(broker: BrokerThread) -> None:
    before = _ids(broker.url, TOPIC, 3, "a")
    middle = int(time.time() * 1000)
    # Publish times are whole milliseconds: the next ones are at or after ``middle``.
    while int(time.time() * 1000) <= middle:
        time.sleep(0.001)
    after = _ids(broker.url, TOPIC, 2, "b")
    client = Client(broker.url)
    try:
        probe = Probe(client, TOPIC, 10_000)
        last = probe.last_message_id()
        assert (last.ledger_id(), last.entry_id()) == after[-1]
        assert probe.first_from(EARLIEST) == Position(*before[0], 0)
        assert probe.first_from(Position(*before[1], 0)) == Position(*before[1], 0)
        assert probe.at_time(middle) == Position(*after[0], 0)
        assert probe.at_time(0) == Position(*before[0], 0)
        assert probe.at_time(int(time.time() * 1000) + 60_000) is None
        probe.close()
    finally:
        client.close()


def test_budget_across_ledgers(tmp_path: Path) -> None:
    """A restart opens a new ledger: a cut past the first ledger's end is found by one probe
    read without ``admin.url``, and from the ledgers' sizes with it."""
    config = broker_config(tmp_path / "data")
    first = BrokerThread(config).start()
    try:
        old = _ids(first.url, TOPIC, 3, "a")
    finally:
        first.stop()
    second = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        new = _ids(second.url, TOPIC, 4, "b")
        assert new[0][0] > old[0][0]
        start = Position(*old[1], 0)
        latest = Position(*new[-1], 1)
        key = (TOPIC, 0)
        for admin, five, every in (
            (None, Position(*new[0], 0), Position(*new[0], 0)),
            (second.http, Position(*new[3], 0), latest),
        ):
            options = {"service.url": second.url, "topic": TOPIC}
            planner = Planner(
                SourceOptions.parse(options | ({"admin.url": admin} if admin else {}))
            )
            assert planner.partitions_of(TOPIC) == [0]
            # 2 entries left in the old ledger, then 4 in the new one; without the ledgers'
            # sizes a budget past the old ledger's end stops at the new one's first entry.
            assert planner.fair_ends({key: (start, latest)}, 5) == {key: five}
            assert planner.fair_ends({key: (start, latest)}, 2) == {key: Position(*new[0], 0)}
            assert planner.fair_ends({key: (EARLIEST, latest)}, 1) == {key: Position(*old[1], 0)}
            assert planner.fair_ends({key: (start, latest)}, 100) == {key: every}
            assert planner.fair_ends({key: (Position(*new[0], 0), latest)}, 100) == {key: latest}
            planner.close()
    finally:
        second.stop()


def test_fair_ends_over_uneven_partitions(broker: BrokerThread) -> None:
    topics = {f"persistent://public/default/fair-{i}": n for i, n in enumerate((40, 20, 6, 1))}
    for topic, count in topics.items():
        produce(broker.url, topic, [Sent(f"m{i}".encode()) for i in range(count)])
    planner = Planner(SourceOptions.parse({"service.url": broker.url, "topics": ",".join(topics)}))
    ranges = {(topic, 0): (EARLIEST, planner.latest(topic, 0)) for topic in topics}
    ends = planner.fair_ends(ranges, 10)
    ledger = ends[(next(iter(topics)), 0)].ledger  # one ledger each, from entry 0
    taken = {
        topic: entries_between(Position(ledger, 0, 0), ends[(topic, 0)], None) for topic in topics
    }
    # 40/67 * 10 -> 5, 20/67 * 10 -> 2, 6/67 * 10 -> 0 -> at least 1, and 1 -> 1.
    assert list(taken.values()) == [5, 2, 1, 1]
    # A partition that went back below its start (deleted and re-created) is counted from
    # its earliest message, as the range is read.
    key = (next(iter(topics)), 0)
    behind = {key: (Position(ledger + 5, 0, 0), ranges[key][1])}
    assert planner.fair_ends(behind, 3) == {key: Position(ledger, 3, 0)}
    planner.close()
