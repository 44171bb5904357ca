"""A sealed segment cut or bit-flipped after a clean stop: the official client's producer,
consumer and reader each fail within a second with the reason (file and offset); the topic stats
show the damage; ``magnetar repair-topic --truncate-to-valid-prefix``, run while the broker keeps
serving, cuts the topic to its valid prefix, which the same client then reads exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.errors import ServiceNotReady, TopicDamaged
from broker.publish.dedup_snapshot import open_ledger_for_dedup
from broker.storage.lock import LedgerLock
from broker.storage.paths import topic_directory
from protocol.topic_name import TopicName
from tests.helpers import REPO, BrokerThread, broker_config, new_client, read_all, topic_stats

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TOPIC = "persistent://public/default/damaged-segment"
ENTRIES_PER_SEGMENT = 10
SENT = 40
DAMAGED_RECORD = 3  # in the second segment: entries 2:3 and later are cut
KEPT = ENTRIES_PER_SEGMENT + DAMAGED_RECORD
CLIENT = Path(__file__).with_name("damaged_topic_client.py")
SEGMENT_HEADER = 20
RECORD_HEADER = 8


def _config(data_dir: Path) -> Any:
    return broker_config(data_dir, managed_ledger_max_entries_per_ledger=ENTRIES_PER_SEGMENT)


def _publish(data_dir: Path) -> None:
    running = BrokerThread(_config(data_dir)).start()
    client = new_client(running.url)
    try:
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        for seq in range(1, SENT + 1):
            producer.send(f"m-{seq}".encode(), sequence_id=seq)
    finally:
        client.close()
        running.stop()  # a clean stop: every segment sealed


def _damage(data_dir: Path, how: str) -> tuple[Path, int]:
    """Damage record ``DAMAGED_RECORD`` of the second sealed segment; return the file and the
    offset the broker reports: the flipped record's start, or where the cut file ends."""
    directory = topic_directory(data_dir, TopicName.parse(TOPIC))
    segment = sorted(directory.glob("*.seg"))[1]
    content = bytearray(segment.read_bytes())
    offset = SEGMENT_HEADER
    for _ in range(DAMAGED_RECORD):
        offset += RECORD_HEADER + int.from_bytes(content[offset : offset + 4], "little")
    if how == "flip":
        content[offset + RECORD_HEADER + 1] ^= 0x10
    else:
        offset += 5
        del content[offset:]
    segment.write_bytes(bytes(content))
    return segment, offset


def _first_operations(url: str) -> list[dict[str, Any]]:
    """Producer, consumer and reader from a fresh client process (see ``CLIENT``)."""
    completed = subprocess.run(
        [sys.executable, str(CLIENT), url, TOPIC],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(completed.stdout.splitlines()[-1])
    return results


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every ledger open the broker attempts (a refused retry must not re-read the files)."""
    opened: list[Path] = []

    def counting(directory: Path, *args: Any) -> Any:
        opened.append(directory)
        return open_ledger_for_dedup(directory, *args)

    monkeypatch.setattr("broker.service.open_ledger_for_dedup", counting)
    return opened


def _stats_error(http: str) -> tuple[int, dict[str, Any]]:
    path = TOPIC.removeprefix("persistent://")
    try:
        with urllib.request.urlopen(f"{http}/admin/v2/persistent/{path}/stats", timeout=10):
            pass
    except urllib.error.HTTPError as error:
        body: dict[str, Any] = json.loads(error.read())
        return error.code, body
    raise AssertionError("the stats of a damaged topic answered 2xx")


def _repair_topic(data_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "broker", "repair-topic", TOPIC, f"--set=dataDir={data_dir}"]
    return subprocess.run(
        [*command, *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("how", ["flip", "cut"])
def test_damaged_topic_fails_fast_then_repair_serves_exactly_the_valid_prefix(
    tmp_path: Path,
    how: str,
    loads: list[Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    data_dir = tmp_path / "data"
    _publish(data_dir)
    segment, offset = _damage(data_dir, how)
    loads.clear()
    running = BrokerThread(_config(data_dir)).start()
    client = new_client(running.url)
    try:
        reason = f"{segment} at byte offset {offset}"
        results = _first_operations(running.url)
        assert [r["operation"] for r in results] == ["producer", "consumer", "reader"]
        for result in results:
            assert result["error"] == "NotAllowedError", result
            assert result["seconds"] < 1.0, result
            assert any(reason in line for line in result["log"]), result
        assert len(loads) == 1  # the later refusals came from the mark, not from re-reading

        status, body = _stats_error(running.http)
        assert status == 500
        assert body["damaged"]["file"] == str(segment)
        assert body["damaged"]["offset"] == offset
        assert reason in body["reason"]

        dry_run = _repair_topic(data_dir)
        assert dry_run.returncode == 3, dry_run.stdout + dry_run.stderr
        assert f"keeps {KEPT} entries" in dry_run.stdout
        with pytest.raises(pulsar.NotAllowedError):
            client.create_reader(TOPIC, pulsar.MessageId.earliest)  # a dry run cuts nothing
        assert len(loads) == 1
        refusals = [r for r in caplog.records if "refused until repaired" in r.getMessage()]
        assert len(refusals) == 1  # logged once, however often clients retry

        repaired = _repair_topic(data_dir, "--truncate-to-valid-prefix")
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        assert f"drops {SENT - KEPT} entries" in repaired.stdout

        # The same broker, still running, serves exactly the valid prefix.
        expected = [f"m-{seq}".encode() for seq in range(1, KEPT + 1)]
        assert read_all(client, TOPIC) == expected
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        assert producer.last_sequence_id() == KEPT  # dedup state rebuilt from the kept entries
        producer.send(f"m-{KEPT + 1}".encode(), sequence_id=KEPT + 1)  # not taken for a dup
        assert read_all(client, TOPIC) == [*expected, f"m-{KEPT + 1}".encode()]
        assert len(topic_stats(running.http, TOPIC)["publishers"]) == 1  # Pulsar: a list

        loaded = _repair_topic(data_dir, "--truncate-to-valid-prefix")
        assert loaded.returncode == 1
        assert "loaded by a running broker" in loaded.stderr
    finally:
        client.close()
        running.stop()


def test_a_load_during_a_repair_is_retryable_and_an_unload_forgets_the_damage(
    tmp_path: Path, loads: list[Path]
) -> None:
    data_dir = tmp_path / "data"
    _publish(data_dir)
    _damage(data_dir, "flip")
    loads.clear()
    name = TopicName.parse(TOPIC)
    running = BrokerThread(_config(data_dir)).start()
    assert running.broker is not None
    service = running.broker.service
    assert service is not None
    try:
        with pytest.raises(TopicDamaged):
            running.call(lambda: service.get_topic(name, create=False))
        with pytest.raises(TopicDamaged):
            running.call(lambda: service.get_topic(name, create=False))
        assert len(loads) == 1

        running.call(lambda: service.unload_topic(name))  # forgets the mark: loads again
        lock = LedgerLock.try_acquire(topic_directory(data_dir, name))  # as repair-topic does
        assert lock is not None
        try:
            with pytest.raises(ServiceNotReady, match="being repaired"):
                running.call(lambda: service.get_topic(name, create=False))
        finally:
            lock.release()
        with pytest.raises(TopicDamaged):
            running.call(lambda: service.get_topic(name, create=False))
        assert len(loads) == 2
    finally:
        running.stop()
