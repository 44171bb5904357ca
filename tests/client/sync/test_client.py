"""The blocking ``Client``: closing leaves no thread and no socket; namespace listings."""

from __future__ import annotations

import threading
import urllib.request
import uuid

import pytest

from client import Client
from client.errors import AlreadyClosed, OperationNotSupported
from tests.client.sync.helpers import new_topic, sockets_to
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_close_leaves_no_thread_and_no_socket(running: BrokerThread) -> None:
    before = sockets_to(running.port)
    client = Client(running.url)
    producer = client.create_producer(new_topic())
    producer.send(b"x")
    assert sockets_to(running.port) == before + 1
    thread = client.loop_thread
    assert thread.is_alive()
    client.close()
    assert not thread.is_alive()
    assert thread not in threading.enumerate()
    assert sockets_to(running.port) == before
    with pytest.raises(AlreadyClosed):
        producer.send(b"y")
    with pytest.raises(AlreadyClosed):
        client.create_producer(new_topic())
    client.close()  # idempotent


def test_topics_of_namespace_lists_the_partitions_of_a_partitioned_topic(
    running: BrokerThread,
) -> None:
    name = f"sync-ns-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(
        f"{running.http}/admin/v2/persistent/public/default/{name}/partitions",
        data=b"2",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    with Client(running.url) as client:
        full = f"persistent://public/default/{name}"
        assert client.get_topic_partitions(name) == [f"{full}-partition-{i}" for i in (0, 1)]
        # Partitions show up in the namespace's list once they exist as topics.
        client.create_producer(name).close()
        listed = client.get_topics_of_namespace("public/default")
        assert {f"{full}-partition-0", f"{full}-partition-1"} <= set(listed)
        consumer = client.subscribe(name, "sub")
        with pytest.raises(OperationNotSupported):
            consumer.get_last_message_id()
