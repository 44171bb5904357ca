"""Fixtures of the producer tests: one broker per test module (entries capped at 64 KiB, so
the size limits are reachable with small payloads) and an official client reading back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import BrokerThread, broker_config

#: The broker's maxMessageSize in these tests.
MAX_MESSAGE_SIZE = 64 * 1024


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data = tmp_path_factory.mktemp("producer") / "data"
    broker = BrokerThread(broker_config(data, max_message_size=MAX_MESSAGE_SIZE)).start()
    try:
        yield broker
    finally:
        broker.stop()
