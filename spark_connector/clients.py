"""One ``client.sync.Client`` per Python process and service URL, opened on first use.

Data source, reader and writer objects are built in throwaway driver-side planner processes and
pickled to executors, so they never hold a client: ``read()``/``write()`` (and the long-lived
stream reader's planning methods) call ``shared_client`` there. Spark reuses its Python workers
across tasks, so the client (its loop thread and connections) is reused too. A forked worker
gets a fresh one: the cache is keyed by process id as well.

Three things the blocking facade does not offer yet are bridged here, in one place:
``last_message_id`` (GET_LAST_MESSAGE_ID) and ``topics_of_namespace`` through its ``_run``, and
``fast_receiver``: ``Reader.read_next`` makes a round trip through the client's loop for every
message (about 90 us here) while ``Consumer.receive`` takes queued messages directly (about
6 us); wrapping the reader's consumer in the facade's ``Consumer`` gives readers that path.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from client.consumer import AsyncConsumer
from client.message_id import MessageId
from client.sync import Client, Consumer, Reader

__all__ = [
    "acknowledged",
    "fast_receiver",
    "last_message_id",
    "shared_client",
    "topics_of_namespace",
]

_lock = threading.Lock()
_clients: dict[tuple[int, str, tuple[tuple[str, Any], ...]], Client] = {}


def shared_client(service_url: str, options: dict[str, Any] | None = None) -> Client:
    """This process's client for ``service_url`` (and these ``client.*`` options)."""
    key = (os.getpid(), service_url, tuple(sorted((options or {}).items())))
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = Client(service_url, **(options or {}))
            _clients[key] = found
        return found


@atexit.register
def _close_all() -> None:
    with _lock:
        mine = [c for (pid, *_), c in _clients.items() if pid == os.getpid()]
        _clients.clear()
    for client in mine:
        try:
            client.close()
        except Exception:
            pass


def _partition_consumer(reader: Reader) -> AsyncConsumer:
    """The one consumer under a reader of one partition (partitioned topics: issue #13)."""
    consumer = reader._reader.consumer
    if not isinstance(consumer, AsyncConsumer):
        raise TypeError(f"{reader.topic()} is partitioned: the connector reads one partition")
    return consumer


def last_message_id(client: Client, reader: Reader) -> MessageId:
    """The partition's last message id (entry id -1: empty), via GET_LAST_MESSAGE_ID."""
    wire, _ = client._run(_partition_consumer(reader).get_last_message_id())
    return MessageId.from_wire(wire)


def topics_of_namespace(client: Client, namespace: str) -> list[str]:
    """Every topic of ``namespace`` (``tenant/ns``)."""
    return client._run(client.async_client.get_topics_of_namespace(namespace))


def fast_receiver(client: Client, reader: Reader) -> Consumer:
    """The reader's messages through ``Consumer.receive``'s fast path (same order, same filter)."""
    return Consumer(client, _partition_consumer(reader))


def acknowledged(client: Client, consumer: Consumer) -> None:
    """Return once the broker has the acknowledgements ``consumer`` made so far.

    The facade's acknowledgements are fire-and-forget, and Spark kills the source's planning
    process right after ``commit``: a request answered on the same connection (which the
    broker handles in order) after the acknowledgements were written proves they arrived.
    """
    inner = consumer.async_consumer
    if isinstance(inner, AsyncConsumer):
        client._run(inner.get_last_message_id())
