"""Connections shared by everything a client opens, one per (logical, physical) address pair.

As in the official clients, all producers, consumers and lookups that talk to the same broker
share one socket. A connection is opened on first use by a task of its own, so concurrent
callers wait for the same handshake and a caller that gives up (cancellation) does not abandon
it for the others. A connection that closes removes itself; the next caller opens a new one.

When the client switches to another cluster (``client.service_info``), ``switch`` takes the new
settings (credentials, TLS) and hands back every open connection for closing; a connection
still being opened for the old cluster is closed as soon as it is ready, and its callers get
``Disconnected`` (retriable), so they look the topic up again on the new cluster.
"""

from __future__ import annotations

import asyncio
import contextlib

from client.config import ClientConfig
from client.connection import Connection
from client.errors import AlreadyClosed, Disconnected
from client.service_url import Address

__all__ = ["ConnectionPool"]

_Key = tuple[Address, Address]


class ConnectionPool:
    """Open connections by address pair; ``close()`` closes them all."""

    def __init__(self, config: ClientConfig, cluster: str = "") -> None:
        self._config = config
        # The service URL of the cluster in use: every connection is marked with it.
        self._cluster = cluster
        self._connections: dict[_Key, Connection] = {}
        self._opening: dict[_Key, asyncio.Task[Connection]] = {}
        self._closed = False
        # Bumped by each switch of cluster: a connection opened under an older one is stale.
        self._generation = 0

    async def get(self, logical: Address, physical: Address | None = None) -> Connection:
        """A ready connection to ``physical`` speaking for ``logical`` (the same by default).

        Raises:
            Disconnected: the broker cannot be reached (retriable).
            AlreadyClosed: the pool is closed.
        """
        if self._closed:
            raise AlreadyClosed("the client is closed")
        key = (logical, physical or logical)
        connection = self._connections.get(key)
        if connection is not None and connection.is_ready:
            return connection
        task = self._opening.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(key, self._generation))
            task.add_done_callback(_retrieve_exception)
            self._opening[key] = task
        return await asyncio.shield(task)

    async def _open(self, key: _Key, generation: int) -> Connection:
        try:
            connection = await Connection.open(key[0], key[1], self._config)
        finally:
            if self._opening.get(key) is asyncio.current_task():
                del self._opening[key]
        if self._closed:
            await connection.close()
            raise AlreadyClosed("the client is closed")
        if generation != self._generation:
            await connection.close()
            raise Disconnected("the client switched to another cluster while connecting")
        connection.cluster = self._cluster
        self._connections[key] = connection
        connection.add_close_listener(self._forget)
        return connection

    def _forget(self, connection: Connection) -> None:
        key = (connection.logical, connection.physical)
        if self._connections.get(key) is connection:
            del self._connections[key]

    def switch(self, config: ClientConfig, cluster: str) -> list[Connection]:
        """Use ``config`` for every connection opened from now on, to the cluster whose service
        URL is ``cluster``; the open connections, for the caller to close (their producers and
        consumers then reconnect)."""
        self._config = config
        self._cluster = cluster
        self._generation += 1
        # Later callers open afresh; what was being opened fails with Disconnected.
        self._opening.clear()
        stale = list(self._connections.values())
        self._connections.clear()
        return stale

    @property
    def connections(self) -> list[Connection]:
        """The open connections (for statistics and tests)."""
        return list(self._connections.values())

    async def close(self) -> None:
        """Close every connection and wait until their transports are gone."""
        self._closed = True
        opening = list(self._opening.values())
        for task in opening:
            task.cancel()
        for task in opening:
            with contextlib.suppress(BaseException):
                await task
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(connection.close() for connection in connections))


def _retrieve_exception(task: asyncio.Task[Connection]) -> None:
    # Every waiter may have been cancelled (shield): mark the outcome as seen.
    if not task.cancelled():
        task.exception()
