"""broker.metadata (document, policies, schemas): what the stores accept, and how they write:
durable before the coroutine returns, written off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import document
from broker.metadata.document import JsonDocument
from broker.metadata.policies import FilePolicyStore
from broker.metadata.schemas import FileSchemaStore
from protocol.topic_name import InvalidTopicNameError


@pytest.mark.parametrize(
    "bad", ["public/..", "../default", "./x", "public", "a/b/c", "te nant/ns", "t/n%2Fs", ""]
)
async def test_create_namespace_refuses_invalid_names(tmp_path: Path, bad: str) -> None:
    store = FilePolicyStore(tmp_path)
    with pytest.raises(InvalidTopicNameError):
        await store.create_namespace(bad)
    assert not store.has_namespace(bad)
    assert not (tmp_path / "policies.json").exists()


async def test_create_namespace_accepts_pulsar_names(tmp_path: Path) -> None:
    store = FilePolicyStore(tmp_path)
    assert await store.create_namespace("My_Tenant-1/ns=a:b.c")
    assert FilePolicyStore(tmp_path).has_namespace("My_Tenant-1/ns=a:b.c")


class WriteGate:
    """Wraps ``atomic_write``: records the writing thread, holds writes while closed."""

    def __init__(self, write: Callable[..., None]) -> None:
        self._write = write
        self.opened = threading.Event()
        self.opened.set()
        self.reached = threading.Event()
        self.threads: list[str] = []

    def __call__(self, *args: Any) -> None:
        self.threads.append(threading.current_thread().name)
        self.reached.set()
        assert self.opened.wait(10)
        self._write(*args)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteGate]:
    wrapped = WriteGate(document.atomic_write)
    monkeypatch.setattr(document, "atomic_write", wrapped)
    yield wrapped
    wrapped.opened.set()


async def test_changes_are_written_by_a_disk_thread_and_survive_a_reload(
    tmp_path: Path, gate: WriteGate
) -> None:
    policies = FilePolicyStore(tmp_path)
    assert await policies.create_namespace("acme/orders")
    assert not await policies.create_namespace("acme/orders")
    await policies.set_namespace_dedup("acme/orders", False)
    await policies.set_topic_dedup("persistent://acme/orders/t", True)
    schemas = FileSchemaStore(tmp_path)
    assert await schemas.put("persistent://acme/orders/t", b"v0") == bytes(8)
    assert await schemas.put("persistent://acme/orders/t", b"v1") == (1).to_bytes(8, "big")
    assert gate.threads
    assert all(name.startswith("magnetar-disk") for name in gate.threads)

    reloaded = FilePolicyStore(tmp_path)
    assert reloaded.has_namespace("acme/orders")
    assert reloaded.dedup_enabled("persistent://acme/orders/t", "acme/orders", False)
    assert not reloaded.dedup_enabled("persistent://acme/orders/x", "acme/orders", True)
    assert FileSchemaStore(tmp_path).get("persistent://acme/orders/t", None) == (
        b"v1",
        (1).to_bytes(8, "big"),
    )
    await schemas.delete("persistent://acme/orders/t")
    assert FileSchemaStore(tmp_path).get("persistent://acme/orders/t", None) is None


async def test_the_loop_serves_on_while_a_write_waits_for_the_disk(
    tmp_path: Path, gate: WriteGate
) -> None:
    schemas = FileSchemaStore(tmp_path)
    gate.opened.clear()
    first = asyncio.create_task(schemas.put("t", b"schema"))
    again = asyncio.create_task(schemas.put("t", b"schema"))  # known, not yet durable
    assert await asyncio.to_thread(gate.reached.wait, 10)  # the write is in its disk thread
    for _ in range(5):  # the loop keeps turning while the write is held
        await asyncio.sleep(0.001)
    assert not first.done()
    assert not again.done()  # its answer names a version that is not durable yet
    gate.opened.set()
    assert await first == await again == bytes(8)
    assert FileSchemaStore(tmp_path).get("t", None) == (b"schema", bytes(8))


def test_an_older_snapshot_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    """Snapshots are written by several disk threads and may finish in any order."""
    document = JsonDocument(tmp_path / "doc.json")
    document._write(2, b'{"newer": true}')
    document._write(1, b'{"older": true}')
    assert document.load() == {"newer": True}
