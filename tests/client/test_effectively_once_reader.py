"""Issue #11 Deliver 5: the effectively-once reader helper applies every message exactly once.

The crash test runs the blocking helper in a subprocess and SIGKILLs it twice: once while a
transaction is open (the worker blocks inside ``apply`` after its state change, before the
commit), once at whatever point it has reached half way. A third run finishes the topic; the
application's table then holds every message exactly once, in order. The in-process tests
show the guard against re-reads (a seek back to the start applies nothing) and the rollback of
a failing ``apply``.

Run as a module, this file is the worker: ``python -m tests.client.test_effectively_once_reader
URL TOPIC DATABASE [HANG_AT MARKER]``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from client import AsyncClient, Client, Message, MessageId
from client.effectively_once import AsyncEffectivelyOnceReader, EffectivelyOnceReader
from tests.helpers import REPO, BrokerThread, wait_until

pytestmark = [pytest.mark.integration]

TABLE = "CREATE TABLE IF NOT EXISTS applied (seq INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT)"


def apply_row(connection: sqlite3.Connection, message: Message) -> None:
    """The application's state change: one row per applied message (duplicates would show)."""
    connection.execute("INSERT INTO applied (value) VALUES (?)", (message.data().decode(),))


def applied_values(database: Path) -> list[str]:
    with sqlite3.connect(database) as connection:
        connection.execute(TABLE)
        rows = connection.execute("SELECT value FROM applied ORDER BY seq").fetchall()
    connection.close()
    return [row[0] for row in rows]


def worker(url: str, topic: str, database: str, hang_at: str | None, marker: str | None) -> None:
    def apply(connection: sqlite3.Connection, message: Message) -> None:
        apply_row(connection, message)
        if message.data().decode() == hang_at:
            assert marker is not None
            Path(marker).touch()  # the state change is made, not committed: kill me now
            threading.Event().wait()

    with (
        Client(url) as client,
        EffectivelyOnceReader(client, topic, database, apply) as reader,
    ):
        reader.store.connection.execute(TABLE)
        reader.process_available()


def new_topic() -> str:
    return f"persistent://public/default/eo-reader-{uuid.uuid4().hex[:10]}"


def publish(url: str, topic: str, count: int) -> list[str]:
    """``count`` messages in batches of 7, so positions are batch indexes too."""
    values = [f"m{i}" for i in range(count)]
    with Client(url) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=7)
        for value in values:
            producer.send_async(value.encode(), None)
        producer.flush()
        producer.close()
    return values


def wait_for_rows(database: Path, count: int, timeout: float = 30) -> None:
    """Poll every millisecond (a worker applies hundreds of messages per second)."""
    deadline = time.monotonic() + timeout
    while len(applied_values(database)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} rows applied in time"
        time.sleep(0.001)


def start_worker(url: str, topic: str, database: Path, *hang: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.client.test_effectively_once_reader"]
    return subprocess.Popen([*command, url, topic, str(database), *hang], cwd=REPO)


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL  # killed, not finished on its own


@pytest.mark.slow
def test_sigkilled_worker_applies_each_message_exactly_once(
    running: BrokerThread, tmp_path: Path
) -> None:
    topic, database, marker = new_topic(), tmp_path / "app.db", tmp_path / "in-apply"
    expected = publish(running.url, topic, 400)

    # 1. Killed inside a transaction: m120's row is written, its position is not.
    first = start_worker(running.url, topic, database, "m120", str(marker))
    try:
        wait_until(marker.exists, timeout=30)
    finally:
        kill(first)
    assert applied_values(database) == expected[:120]

    # 2. Killed wherever it is once half the topic is applied.
    second = start_worker(running.url, topic, database)
    try:
        wait_for_rows(database, 150)
    finally:
        kill(second)
    partial = applied_values(database)
    assert partial == expected[: len(partial)]
    assert len(partial) < len(expected)

    # 3. Runs to the end of the topic.
    third = start_worker(running.url, topic, database)
    assert third.wait(60) == 0
    assert applied_values(database) == expected


async def test_rereads_are_not_applied_again(running: BrokerThread, tmp_path: Path) -> None:
    topic, database = new_topic(), tmp_path / "app.db"
    expected = publish(running.url, topic, 30)
    async with AsyncClient(running.url) as client:
        helper = AsyncEffectivelyOnceReader(client, topic, database, apply_row)
        async with helper:
            helper.store.connection.execute(TABLE)
            assert await helper.process_available() == 30
            last = helper.position()
            assert last is not None
            assert last.batch_index() == 29 % 7
            # A re-read (here a seek back to the start) changes nothing.
            await helper.reader.seek(MessageId.earliest)
            assert [await helper.process_next(5000) for _ in range(30)] == [False] * 30
            assert helper.position() == last
        # A restart resumes after the stored id: nothing left to apply.
        async with AsyncEffectivelyOnceReader(client, topic, database, apply_row) as again:
            assert not await again.reader.has_message_available()
    assert applied_values(database) == expected


def test_failing_apply_rolls_back_state_and_position(running: BrokerThread, tmp_path: Path) -> None:
    topic, database = new_topic(), tmp_path / "app.db"
    expected = publish(running.url, topic, 5)

    def apply_until_m3(connection: sqlite3.Connection, message: Message) -> None:
        apply_row(connection, message)
        if message.data() == b"m3":
            raise RuntimeError("the application failed")

    with Client(running.url) as client:
        with EffectivelyOnceReader(client, topic, database, apply_until_m3) as helper:
            helper.store.connection.execute(TABLE)
            with pytest.raises(RuntimeError, match="application failed"):
                helper.process_available()
            assert applied_values(database) == expected[:3]
        # The next run reads m3 again and applies it once.
        with EffectivelyOnceReader(client, topic, database, apply_row) as helper:
            assert helper.process_available() == 2
    assert applied_values(database) == expected


if __name__ == "__main__":
    url, topic, database, *hang = sys.argv[1:]
    hang_at, marker = (hang[0], hang[1]) if hang else (None, None)
    worker(url, topic, database, hang_at, marker)
    os._exit(0)
