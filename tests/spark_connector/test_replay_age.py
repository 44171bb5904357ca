"""The sink refuses a micro-batch older than the broker keeps an idle producer's state (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_connector.replay_age import DedupStateExpired, batch_timestamp_ms, check_replay_age


def write_offsets(checkpoint: Path, batch: int, started_ms: int) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": started_ms, "conf": {}}
    (checkpoint / "offsets" / str(batch)).write_text("v1\n" + json.dumps(metadata) + '\n{"v":1}\n')


def test_batch_start_is_read_from_the_checkpoint(tmp_path: Path) -> None:
    write_offsets(tmp_path, 3, 1_700_000_000_000)
    assert batch_timestamp_ms(str(tmp_path), 3) == 1_700_000_000_000
    assert batch_timestamp_ms(f"file://{tmp_path}/", 3) == 1_700_000_000_000
    with pytest.raises(DedupStateExpired, match="cannot read when batch 4 started"):
        batch_timestamp_ms(str(tmp_path), 4)


def test_a_batch_older_than_the_timeout_is_refused() -> None:
    minute = 60_000
    start = 1_700_000_000_000
    check_replay_age(start, 360, 2, "p", now_ms=start + 300 * minute)  # young enough
    check_replay_age(start, 0, 2, "p", now_ms=start + 10_000 * minute)  # check turned off
    with pytest.raises(DedupStateExpired, match="brokerDeduplicationProducerInactivityTimeout"):
        check_replay_age(start, 360, 2, "p", now_ms=start + 330 * minute)  # past the 10% margin
    with pytest.raises(DedupStateExpired, match=r"batch 2 started 0\.1 minutes ago"):
        check_replay_age(start, 0.1, 2, "p", now_ms=start + 6_000)
