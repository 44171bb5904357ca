"""A read timing out before the end of its range: a task failure while the partition still
holds the range, data loss (``failOnDataLoss``) only when it does not."""

from __future__ import annotations

import pytest

from client.message_id import MessageId
from client.sync import Client
from spark_connector.positions import Position
from spark_connector.range_check import range_still_exists
from spark_connector.scan import DataLoss, iter_range
from tests.helpers import BrokerThread


def test_range_still_exists() -> None:
    assert range_still_exists(MessageId(-1, 3, 7, -1), Position(3, 7, 1))
    assert range_still_exists(MessageId(-1, 3, 7, -1), Position(3, 5, 0))
    assert range_still_exists(MessageId(-1, 3, 7, 2), Position(3, 7, 3))
    assert not range_still_exists(MessageId(-1, 3, 7, 2), Position(3, 7, 4))
    assert not range_still_exists(MessageId(-1, 3, 7, -1), Position(3, 9, 0))
    assert not range_still_exists(MessageId(-1, -1, -1, -1), Position(0, 0, 1))


def test_a_range_the_partition_no_longer_holds_is_data_loss(broker: BrokerThread) -> None:
    client = Client(broker.url)
    try:
        producer = client.create_producer("short")
        ids = [producer.send(f"m{i}".encode()) for i in range(3)]
        ledger = ids[0].ledger_id()
        beyond = Position(ledger, 9, 0)  # what a topic re-created shorter no longer has

        def read(fail: bool) -> list[bytes]:
            messages = iter_range(
                client,
                "persistent://public/default/short",
                Position(ledger, 0, 0),
                beyond,
                fail_on_data_loss=fail,
                poll_timeout_ms=300,
            )
            return [m.data() for m in messages]

        with pytest.raises(DataLoss, match="failOnDataLoss"):
            read(True)
        assert read(False) == [b"m0", b"m1", b"m2"]
    finally:
        client.close()
