"""An in-run task retry (``local[2,3]``, in a subprocess): no duplicate with dedup, some without."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, BrokerThread
from tests.spark_connector.helpers import Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]


def test_task_retry_in_the_same_run(broker: BrokerThread, tmp_path: Path) -> None:
    sent = [Sent(f"r{i}".encode(), f"k{i % 2}".encode()) for i in range(40)]
    produce(broker.url, "retry-in", sent)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark_connector.task_retry_job", broker.url, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert consume_all(broker.url, "retry-out-true") == sent
    control = consume_all(broker.url, "retry-out-false")
    assert len(control) > len(sent)  # the retried attempt wrote its first rows again
    assert set(control) == set(sent)
