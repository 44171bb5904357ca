"""The ``world`` fixture: a ledger and one durable subscription over it (``harness.Harness``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.broker.dispatch.harness import Harness


@pytest.fixture
def world(tmp_path: Path) -> Iterable[Harness]:
    harness = Harness(tmp_path / "topic")
    yield harness
    harness.close()
