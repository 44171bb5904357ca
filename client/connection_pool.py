"""Connections shared by everything a client opens, one per (logical, physical) address pair.

As in the official clients, all producers, consumers and lookups that talk to the same broker
share one socket. A connection is opened on first use by a task of its own, so concurrent
callers wait for the same handshake and a caller that gives up (cancellation) does not abandon
it for the others. A connection that closes removes itself; the next caller opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib

from client.config import ClientConfig
from client.connection import Connection
from client.errors import AlreadyClosed
from client.service_url import Address

__all__ = ["ConnectionPool"]

_Key = tuple[Address, Address]


class ConnectionPool:
    """Open connections by address pair; ``close()`` closes them all."""

    def __init__(self, config: ClientConfig) -> None:
        self._config = config
        self._connections: dict[_Key, Connection] = {}
        self._opening: dict[_Key, asyncio.Task[Connection]] = {}
        self._closed = False

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
            task = asyncio.get_running_loop().create_task(self._open(key))
            task.add_done_callback(_retrieve_exception)
            self._opening[key] = task
        return await asyncio.shield(task)

    async def _open(self, key: _Key) -> Connection:
        try:
            connection = await Connection.open(key[0], key[1], self._config)
        finally:
            self._opening.pop(key, None)
        if self._closed:
            await connection.close()
            raise AlreadyClosed("the client is closed")
        self._connections[key] = connection
        connection.add_close_listener(self._forget)
        return connection

    def _forget(self, connection: Connection) -> None:
        key = (connection.logical, connection.physical)
        if self._connections.get(key) is connection:
            del self._connections[key]

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
