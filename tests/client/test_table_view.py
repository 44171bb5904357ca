"""TableView (``client.create_table_view``): the latest value per key from a compacted reader,
current when returned, following later writes; ``get``, ``items``, ``for_each_and_listen``."""

from __future__ import annotations

import threading
import urllib.request

import pytest

from client.sync import Client
from tests.helpers import BrokerThread, wait_until

pytestmark = [pytest.mark.integration]


def test_table_view_state_then_updates(broker: BrokerThread) -> None:
    topic = "persistent://public/default/table-view"
    client = Client(broker.url)
    try:
        producer = client.create_producer(topic)
        for key, value in [("a", b"1"), ("b", b"1"), ("a", b"2"), ("c", b"1"), ("b", b"")]:
            producer.send(value, partition_key=key)
        producer.send(b"no key is skipped")
        url = f"{broker.http}/admin/v2/persistent/public/default/table-view/compaction"
        with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10):
            pass
        producer.send(b"3", partition_key="a")  # after the horizon: from the log
        view = client.create_table_view(topic)
        assert view.get("a") == b"3"
        assert view.get("b") is None
        assert dict(view.items()) == {"a": b"3", "c": b"1"}
        assert len(view) == 2
        assert "c" in view

        seen: list[tuple[str, bytes]] = []
        lock = threading.Lock()

        def record(key: str, value: bytes) -> None:
            with lock:
                seen.append((key, value))

        view.for_each_and_listen(record)
        assert sorted(seen) == [("a", b"3"), ("c", b"1")]
        producer.send(b"9", partition_key="z")
        producer.send(b"", partition_key="c")
        wait_until(lambda: view.get("z") == b"9" and view.get("c") is None)
        with lock:
            assert seen[-1] == ("z", b"9")
        view.close()
    finally:
        client.close()


def test_the_official_table_view_against_magnetar(broker: BrokerThread) -> None:
    """The official client's own ``create_table_view`` (C++ ``TableViewImpl``: a compacted
    reader) sees the compacted state and later updates."""
    from tests.helpers import close_client, new_client

    topic = "persistent://public/default/table-view-official"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for key, value in [("a", b"1"), ("b", b"1"), ("a", b"2"), ("b", b"")]:
            producer.send(value, partition_key=key)
        url = f"{broker.http}/admin/v2/persistent/public/default/table-view-official/compaction"
        with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10):
            pass
        view = client.create_table_view(topic)
        assert view.get("a") == b"2"
        assert view.get("b") is None
        assert len(view) == 1
        seen: list[tuple[str, bytes]] = []
        view.for_each_and_listen(lambda key, value: seen.append((key, value)))
        producer.send(b"7", partition_key="c")
        wait_until(lambda: view.get("c") == b"7")
        wait_until(lambda: ("c", b"7") in seen)
        view.close()
    finally:
        close_client(client)
