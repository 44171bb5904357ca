"""A retried task whose rows arrive in another order, sorted with spills (many runs merged by
``run_merge``), numbers them as the failed attempt did: every row stored exactly once
(``local[2,3]``, in a subprocess). A merge whose order depended on the arrival order or on the
spill points would number the retry's rows otherwise: the replay guard would fail the task, or
rows would be dropped as duplicates of others."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import consume_all, run_spark_job
from tests.spark_connector.spill_retry_job import FAULT_ROWS, ROWS, SORT_BUFFER_BYTES

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]


def test_spilled_sort_numbers_a_reordered_retry_alike(broker: BrokerThread, tmp_path: Path) -> None:
    # Each task's rows (half of them, over 100 bytes each) fill the buffer many times over.
    assert len(ROWS) // 2 * 100 > 8 * SORT_BUFFER_BYTES
    run_spark_job("spill_retry_job", broker.url, str(tmp_path))
    result = json.loads((tmp_path / "results.json").read_text())["spill"]
    assert result == "ok", result[-2500:]
    written = consume_all(broker.url, "spill-retry")
    assert Counter((m.key, m.value) for m in written) == Counter(
        (k.encode(), v.encode()) for k, v in ROWS
    )
    assert len(written) == len(ROWS) > FAULT_ROWS
