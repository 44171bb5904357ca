"""A retried task gets its rows in another order (after a shuffle): every row exactly once; a
retry whose rows changed fails with the replay guard's error (``local[2,3]``, in a subprocess).

Both fail on the sink that numbered rows in arrival order: the retry's first rows were dropped
as duplicates of other rows and the first attempt's rows stored twice, silently.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import BrokerThread
from tests.spark_connector.helpers import consume_all, run_spark_job
from tests.spark_connector.reorder_job import ROWS

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]


def test_reordered_retry_writes_every_row_once_and_a_changed_one_fails(
    broker: BrokerThread, tmp_path: Path
) -> None:
    run_spark_job("reorder_job", broker.url, str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())

    assert results["permute"] == "ok", results["permute"][-2500:]
    written = Counter((m.key, m.value) for m in consume_all(broker.url, "reorder-permute"))
    assert written == Counter((k.encode(), v.encode()) for k, v in ROWS)

    assert "ReplayMismatch" in results["drop"]
    assert "an earlier attempt of batch 0 stored row 5" in results["drop"]
    # Only what the first attempt of partition 0 stored (and partition 1, which did not fail).
    written = Counter((m.key, m.value) for m in consume_all(broker.url, "reorder-drop"))
    assert max(written.values()) == 1
    assert len(written) < len(ROWS)
