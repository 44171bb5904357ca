"""SIGKILL during compaction: the broker subprocess pauses at each stage of a compaction (the
``TEST_MAGNETAR_COMPACTION_PAUSE`` seam) and is killed there. After a restart a compacted reader
reads exactly the old view plus the log after it, or exactly the new view plus nothing: never a
mix; and one view file is left, the one the ``__compaction`` cursor names."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pulsar
import pytest

from broker.compaction.compactor import PAUSE_ENV, PAUSE_MARKER_ENV, STAGES
from tests.helpers import BrokerProcess, close_client, env, new_client, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "persistent://public/default/compaction-crash"
Read = list[tuple[str | None, bytes]]


def _url(broker: BrokerProcess) -> str:
    return f"{broker.http}/admin/v2/persistent/{TOPIC.removeprefix('persistent://')}/compaction"


def put_compaction(broker: BrokerProcess) -> None:
    with urllib.request.urlopen(urllib.request.Request(_url(broker), method="PUT"), timeout=10):
        pass


def status(broker: BrokerProcess) -> str:
    with urllib.request.urlopen(_url(broker), timeout=10) as reply:
        found: str = json.loads(reply.read())["status"]
    return found


def publish(client: pulsar.Client, items: Read) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for key, value in items:
        producer.send(value, partition_key=key) if key else producer.send(value)
    producer.close()


def read(client: pulsar.Client, compacted: bool) -> Read:
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=compacted)
    out: Read = []
    while reader.has_message_available():
        message = reader.read_next(5000)
        out.append((message.partition_key() or None, message.data()))
    reader.close()
    return out


def compacted_model(log: Read) -> Read:
    """What compaction of ``log`` keeps, in log order."""
    latest: dict[str, int] = {}
    for index, (key, value) in enumerate(log):
        if key is not None:
            if value:
                latest[key] = index
            else:
                latest.pop(key, None)
    return [
        (key, value)
        for index, (key, value) in enumerate(log)
        if key is None or latest.get(key) == index
    ]


@pytest.mark.parametrize("stage", STAGES)
def test_sigkill_at_each_stage_leaves_the_old_or_the_new_view(tmp_path: Path, stage: str) -> None:
    data = tmp_path / "data"
    first: Read = [("a", b"a1"), ("b", b"b1"), (None, b"n1"), ("a", b"a2"), ("c", b"c1")]
    second: Read = [("b", b""), ("c", b"c2"), (None, b"n2"), ("d", b"d1"), ("a", b"a3")]
    broker = BrokerProcess(data).start()
    try:
        client = new_client(broker.url)
        publish(client, first)
        put_compaction(broker)
        wait_until(lambda: status(broker) == "SUCCESS")
        publish(client, second)
        close_client(client)
    finally:
        broker.kill()
    marker = tmp_path / "paused"
    with env(**{PAUSE_ENV: stage, PAUSE_MARKER_ENV: str(marker)}):
        broker = BrokerProcess(data).start()
    try:
        put_compaction(broker)
        wait_until(marker.exists, timeout=20)
    finally:
        broker.kill()  # SIGKILL while paused at ``stage``
    broker = BrokerProcess(data).start()
    try:
        client = new_client(broker.url)
        log = read(client, compacted=False)
        assert log == first + second
        old = compacted_model(first) + second
        new = compacted_model(first + second)
        got = read(client, compacted=True)
        expected = new if stage == "after-cursor" else old
        assert got == expected, (stage, got)
        views = sorted(p.name for p in data.rglob("*.compacted"))
        assert len(views) == 1, views
        # And compaction goes on from there.
        put_compaction(broker)
        wait_until(lambda: status(broker) == "SUCCESS")
        assert read(client, compacted=True) == new
        close_client(client)
    finally:
        broker.kill()
