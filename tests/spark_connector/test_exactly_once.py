"""Exactly-once topic -> topic under faults; the same faults without dedup show duplicates.

Each test runs a pass-through query (4 micro-batches of 10 messages: ``maxOffsetsPerTrigger``)
with sink batches of 4 rows, so a fault lands between client batches of a micro-batch. Faults are
one-shot marker files the connector reads under the test-only ``testing.faultDir`` option. After
the restart the output topic is compared with the input exactly.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BrokerThread, wait_until
from tests.spark_connector.helpers import FixedPortBroker, Sent, consume_all, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration]

INPUT = [
    Sent(f"row-{i}".encode(), f"k{i % 3}".encode(), (("i", str(i)),), 1_700_000_000_000 + i)
    for i in range(40)
]


def start_query(spark: Any, url: str, tmp: Path, exactly_once: bool, **source: str) -> Any:
    faults = tmp / "faults"
    faults.mkdir(exist_ok=True)
    reader = (
        spark.readStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "eo-in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
    )
    for key, value in source.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("dedup-topic")
        .option("service.url", url)
        .option("topic", "eo-out")
        .option("exactlyOnce", str(exactly_once).lower())
        .option("batchingMaxMessages", "4")
        .option("testing.faultDir", str(faults))
        .option("checkpointLocation", str(tmp / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )


def run_to_end(spark: Any, url: str, tmp: Path, exactly_once: bool) -> None:
    query = start_query(spark, url, tmp, exactly_once)
    assert query.awaitTermination(120)
    assert query.exception() is None


def run_to_failure(spark: Any, url: str, tmp: Path, exactly_once: bool, match: str) -> None:
    query = start_query(spark, url, tmp, exactly_once)
    with pytest.raises(Exception, match=match):
        query.awaitTermination(120)


def check_output(url: str, exactly_once: bool) -> None:
    out = consume_all(url, "eo-out")
    if exactly_once:
        assert out == INPUT
    else:  # the control: at-least-once shows the replayed rows twice
        assert len(out) > len(INPUT)
        assert set(out) == set(INPUT)


def mark(tmp: Path, name: str, content: str = "") -> None:
    (tmp / "faults").mkdir(exist_ok=True)
    (tmp / "faults" / name).write_text(content)


MODES = [pytest.param(True, id="exactly-once"), pytest.param(False, id="at-least-once")]


@pytest.mark.parametrize("exactly_once", MODES)
def test_task_fails_mid_write(
    spark: Any, broker: BrokerThread, tmp_path: Path, exactly_once: bool
) -> None:
    produce(broker.url, "eo-in", INPUT)
    mark(tmp_path, "write-b1-p0", "6")  # batch 1: 6 rows sent (one whole client batch) then fail
    run_to_failure(spark, broker.url, tmp_path, exactly_once, "injected failure after 6 rows")
    assert not (tmp_path / "faults" / "write-b1-p0").exists()
    run_to_end(spark, broker.url, tmp_path, exactly_once)
    check_output(broker.url, exactly_once)


@pytest.mark.parametrize("exactly_once", MODES)
def test_sink_commit_fails(
    spark: Any, broker: BrokerThread, tmp_path: Path, exactly_once: bool
) -> None:
    produce(broker.url, "eo-in", INPUT)
    mark(tmp_path, "commit-b2")
    run_to_failure(spark, broker.url, tmp_path, exactly_once, "injected sink commit failure")
    run_to_end(spark, broker.url, tmp_path, exactly_once)
    check_output(broker.url, exactly_once)


@pytest.mark.parametrize("exactly_once", MODES)
def test_last_commit_file_deleted(
    spark: Any, broker: BrokerThread, tmp_path: Path, exactly_once: bool
) -> None:
    produce(broker.url, "eo-in", INPUT)
    run_to_end(spark, broker.url, tmp_path, exactly_once)
    commits = tmp_path / "ckpt" / "commits"
    last = max(commits.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    assert last.name == "3"
    last.unlink()  # a crash between the sink's commit and Spark's commit log
    (commits / ".3.crc").unlink(missing_ok=True)
    run_to_end(spark, broker.url, tmp_path, exactly_once)
    assert (commits / "3").exists()
    check_output(broker.url, exactly_once)


def test_checkpoint_reset_is_refused(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    """Offsets and commits deleted, metadata (query id) kept: batch ids restart at 0."""
    produce(broker.url, "eo-in", INPUT)
    run_to_end(spark, broker.url, tmp_path, True)
    shutil.rmtree(tmp_path / "ckpt" / "offsets")
    shutil.rmtree(tmp_path / "ckpt" / "commits")
    shutil.rmtree(tmp_path / "ckpt" / "sources", ignore_errors=True)
    run_to_failure(spark, broker.url, tmp_path, True, "checkpoint was reset")
    assert consume_all(broker.url, "eo-out") == INPUT


@pytest.mark.parametrize("then_fail", [False, True], ids=["recovers", "then-task-fails"])
def test_broker_killed_during_a_micro_batch(
    spark: Any, broker_process: FixedPortBroker, tmp_path: Path, then_fail: bool
) -> None:
    """SIGKILL with batch 1 half written; with ``then_fail`` the task also fails afterwards, so
    the whole batch is replayed against the dedup state the broker recovered from its ledger."""
    url = broker_process.url
    produce(url, "eo-in", INPUT)
    mark(tmp_path, "pause-b1-p0", "6")
    if then_fail:
        mark(tmp_path, "write-b1-p0", "9")
    query = start_query(spark, url, tmp_path, True)
    paused = tmp_path / "faults" / "paused-b1-p0"
    wait_until(paused.exists, timeout=120)
    broker_process.kill()  # SIGKILL while the task is inside batch 1
    broker_process.restart()
    assert broker_process.port == broker_process.fixed_port
    (tmp_path / "faults" / "resume-b1-p0").write_text("")
    if then_fail:
        with pytest.raises(Exception, match="injected failure after 9 rows"):
            query.awaitTermination(180)
        query = start_query(spark, url, tmp_path, True)
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert consume_all(url, "eo-out") == INPUT


def test_fail_on_data_loss(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    """The input topic is deleted and re-created under a running checkpoint."""
    produce(broker.url, "eo-in", INPUT[:20])
    run_to_end(spark, broker.url, tmp_path, True)
    request = urllib.request.Request(
        f"{broker.http}/admin/v2/persistent/public/default/eo-in", method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 204
    produce(broker.url, "eo-in", INPUT[20:25])

    query = start_query(spark, broker.url, tmp_path, True)
    with pytest.raises(Exception, match="failOnDataLoss"):
        query.awaitTermination(120)

    query = start_query(spark, broker.url, tmp_path, True, failOnDataLoss="false")
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert consume_all(broker.url, "eo-out") == INPUT[:25]
