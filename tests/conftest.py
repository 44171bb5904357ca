"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import BrokerThread, broker_config


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A real in-process broker on 127.0.0.1:0 with its data in ``tmp_path``."""
    running = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        yield running
    finally:
        running.stop()
