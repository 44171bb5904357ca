"""Shared fixtures of the client tests."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from tests.helpers import BrokerThread, broker_config, close_client, new_client


@pytest.fixture(scope="module")
def running(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerThread]:
    """One broker (default settings) per test module, in a thread of this process."""
    folder = request.module.__name__.rsplit(".", 1)[-1]
    broker = BrokerThread(broker_config(tmp_path_factory.mktemp(folder) / "data")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def official(running: BrokerThread) -> Iterator[pulsar.Client]:
    """The official client on this module's broker, closed after the test."""
    client = new_client(running.url)
    try:
        yield client
    finally:
        close_client(client)
