"""One ``client.sync.Client`` per Python process and service URL, opened on first use.

Data source, reader and writer objects are built in throwaway driver-side planner processes and
pickled to executors, so they never hold a client: ``read()``/``write()`` (and the long-lived
stream reader's planning methods) call ``shared_client`` there. Spark reuses its Python workers
across tasks, so the client (its loop thread and connections) is reused too. A forked worker
gets a fresh one: the cache is keyed by process id as well.

The options are the typed keyword arguments ``client_options`` made; ``authentication`` is an
``AuthSpec`` (a plain value the options can carry to executors), built into the client's
``Authentication`` here, in the process that opens the client.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from client.sync import Client
from spark_connector.auth import AuthSpec

__all__ = ["partition_topics", "shared_client"]

_lock = threading.Lock()
_clients: dict[tuple[int, str, tuple[tuple[str, Any], ...]], Client] = {}


def shared_client(service_url: str, options: dict[str, Any] | None = None) -> Client:
    """This process's client for ``service_url`` (and these ``client.*`` options)."""
    key = (os.getpid(), service_url, tuple(sorted((options or {}).items())))
    with _lock:
        found = _clients.get(key)
        if found is None:
            kwargs = dict(options or {})
            auth = kwargs.get("authentication")
            if isinstance(auth, AuthSpec):
                kwargs["authentication"] = auth.build()
            found = Client(service_url, **kwargs)
            _clients[key] = found
        return found


def partition_topics(client: Client, topic: str) -> tuple[list[str], bool]:
    """``(names, partitioned)``: the topics holding ``topic``'s messages, by partition index.

    A non-partitioned topic is its own partition 0 (``[topic]``, False); a partitioned one
    lists its ``-partition-N`` topics (True), so the connector's partition numbers are
    Pulsar's partition indexes.
    """
    names = client.get_topic_partitions(topic)
    return names, names != [topic]


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
