"""An in-run task retry (``local[2,3]``, in a subprocess): no duplicate with dedup, some without."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce, run_spark_job

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]


def test_task_retry_in_the_same_run(broker: BrokerThread, tmp_path: Path) -> None:
    sent = [Sent(f"r{i}".encode(), f"k{i % 2}".encode()) for i in range(40)]
    produce(broker.url, "retry-in", sent)
    run_spark_job("task_retry_job", broker.url, str(tmp_path), timeout=240)
    assert consume_all(broker.url, "retry-out-true") == sent
    control = consume_all(broker.url, "retry-out-false")
    assert len(control) > len(sent)  # the retried attempt wrote its first rows again
    assert set(control) == set(sent)
