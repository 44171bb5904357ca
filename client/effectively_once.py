"""Effectively-once consumption: the reader pattern of the seeds, on a local sqlite3 database.

A subscription acknowledges *after* the application changed its state, so a crash between
the two applies a message twice; acknowledging first loses it. The seeds' answer (PIP-6 and
the effectively-once article) is to keep the consumer's position where the state lives: read
with a ``Reader`` and commit the application's state change **and** the message id in one
transaction. On restart the reader starts at the stored id, exclusive, so a committed message
is never read again and an uncommitted one (its state change was rolled back with it) is read
again and applied once.

The position lives in a ``magnetar_positions`` table of the application's own sqlite3
database, one row per ``(topic, name)``. The database runs in WAL mode with
``synchronous=FULL``: a commit that returned is on disk, so a process or machine crash after
it cannot undo it. Each transaction also checks the message against the stored id and skips a
message at or before it; a re-read (a reconnection, a ``seek``, two readers of one position)
therefore never applies a message twice.

Both forms take ``apply(connection, message)``: it changes the application's tables with the
given ``sqlite3.Connection`` and must neither commit nor roll back (the helper does, around
it). When it raises, the transaction is rolled back and the error propagates: the message
has not been applied and is read again by the next run.

``EffectivelyOnceReader`` is blocking (a ``Client``; ``apply`` runs in the calling thread).
``AsyncEffectivelyOnceReader`` takes an ``AsyncClient``; ``apply`` and the commit run in a
worker thread (``asyncio.to_thread``), because a commit with ``synchronous=FULL`` waits for
the disk and must not stall the event loop. Both process messages one at a time.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from client.errors import InvalidConfiguration
from client.message import Message
from client.message_id import MessageId
from client.reader import AsyncReader

if TYPE_CHECKING:
    from client.client import AsyncClient
    from client.sync import Client, Reader

__all__ = ["Apply", "AsyncEffectivelyOnceReader", "EffectivelyOnceReader", "PositionStore"]

#: The application's state change for one message, inside the helper's transaction.
Apply = Callable[[sqlite3.Connection, Message], None]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS magnetar_positions (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    message_id BLOB NOT NULL,
    PRIMARY KEY (topic, name)
)
"""


class PositionStore:
    """The sqlite3 side: one database connection and the stored position of one reader.

    Args:
        database: path of the sqlite3 file (created when missing).
        topic: the topic read; part of the position's key.
        name: tells apart several positions on one topic in one database.
    """

    def __init__(self, database: str | Path, topic: str, name: str = "default") -> None:
        self.topic = topic
        self.name = name
        # isolation_level=None: the helper issues BEGIN/COMMIT itself, so nothing is
        # committed behind its back. check_same_thread=False: the async form moves each
        # transaction to a worker thread; transactions never overlap (one message at a time).
        self.connection = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        self.connection.execute(_SCHEMA)

    def position(self) -> MessageId | None:
        """The id of the last message committed, or None before the first."""
        row = self.connection.execute(
            "SELECT message_id FROM magnetar_positions WHERE topic = ? AND name = ?",
            (self.topic, self.name),
        ).fetchone()
        return None if row is None else MessageId.deserialize(row[0], self.topic)

    def commit(self, message: Message, apply: Apply) -> bool:
        """Apply ``message`` and store its id in one transaction.

        Returns:
            False when the message is at or before the stored position (already applied:
            nothing done), True when it was applied and committed.
        """
        connection = self.connection
        # IMMEDIATE takes the write lock now: the position read below cannot go stale.
        connection.execute("BEGIN IMMEDIATE")
        try:
            stored = self.position()
            message_id = message.message_id()
            if stored is not None and message_id <= stored:
                connection.execute("ROLLBACK")
                return False
            apply(connection, message)
            connection.execute(
                "INSERT INTO magnetar_positions (topic, name, message_id) VALUES (?, ?, ?) "
                "ON CONFLICT (topic, name) DO UPDATE SET message_id = excluded.message_id",
                (self.topic, self.name, message_id.serialize()),
            )
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return True

    def close(self) -> None:
        self.connection.close()


def _start_of(store: PositionStore) -> tuple[MessageId, bool]:
    """Where the reader starts: after the stored id, or at the first message of the topic."""
    stored = store.position()
    if stored is None:
        return MessageId.earliest, True
    return stored, False


class AsyncEffectivelyOnceReader:
    """Reads ``topic`` and applies each message exactly once to a sqlite3 database (asyncio).

    Use ``async with`` (or ``start()`` / ``close()``), then ``process_next()`` or
    ``process_available()``.
    """

    def __init__(
        self,
        client: AsyncClient,
        topic: str,
        database: str | Path,
        apply: Apply,
        *,
        name: str = "default",
        reader_name: str | None = None,
    ) -> None:
        self._client = client
        self._apply = apply
        self._reader_name = reader_name
        self.store = PositionStore(database, topic, name)
        self._reader: AsyncReader | None = None

    async def start(self) -> None:
        """Create the reader at the stored position (exclusive) or the topic's start."""
        start, inclusive = _start_of(self.store)
        reader = await self._client.create_reader(
            self.store.topic,
            start,
            reader_name=self._reader_name,
            start_message_id_inclusive=inclusive,
        )
        if not isinstance(reader, AsyncReader):  # one stored position cannot cover partitions
            await reader.close()
            raise InvalidConfiguration(
                f"{self.store.topic} is partitioned: give each partition "
                "(<topic>-partition-<i>) its own effectively-once reader"
            )
        self._reader = reader

    async def process_next(self, timeout_millis: int | None = None) -> bool:
        """Read one message and apply it; False when it had already been applied.

        Raises:
            Timeout: no message within ``timeout_millis``.
            Exception: what ``apply`` raised (the transaction was rolled back).
        """
        message = await self._started().read_next(timeout_millis)
        return await asyncio.to_thread(self.store.commit, message, self._apply)

    async def process_available(self) -> int:
        """Apply every message published so far; returns how many were applied."""
        reader = self._started()
        applied = 0
        while await reader.has_message_available():
            applied += await self.process_next()
        return applied

    def position(self) -> MessageId | None:
        return self.store.position()

    @property
    def reader(self) -> AsyncReader:
        """The underlying reader (to ``seek`` it, say); started first."""
        return self._started()

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        try:
            if reader is not None:
                await reader.close()
        finally:
            self.store.close()

    def _started(self) -> AsyncReader:
        if self._reader is None:
            raise RuntimeError("call start() (or use async with) first")
        return self._reader

    async def __aenter__(self) -> AsyncEffectivelyOnceReader:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


class EffectivelyOnceReader:
    """The blocking form of ``AsyncEffectivelyOnceReader``, on a ``Client``.

    The reader is created at construction; use ``with`` or call ``close()``.
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        database: str | Path,
        apply: Apply,
        *,
        name: str = "default",
        reader_name: str | None = None,
    ) -> None:
        self._apply = apply
        self.store = PositionStore(database, topic, name)
        try:
            start, inclusive = _start_of(self.store)
            self._reader: Reader = client.create_reader(
                topic, start, reader_name=reader_name, start_message_id_inclusive=inclusive
            )
        except BaseException:
            self.store.close()
            raise

    def process_next(self, timeout_millis: int | None = None) -> bool:
        """Read one message and apply it; False when it had already been applied.

        Raises:
            Timeout: no message within ``timeout_millis``.
            Exception: what ``apply`` raised (the transaction was rolled back).
        """
        return self.store.commit(self._reader.read_next(timeout_millis), self._apply)

    def process_available(self) -> int:
        """Apply every message published so far; returns how many were applied."""
        applied = 0
        while self._reader.has_message_available():
            applied += self.process_next()
        return applied

    def position(self) -> MessageId | None:
        return self.store.position()

    @property
    def reader(self) -> Reader:
        return self._reader

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self.store.close()

    def __enter__(self) -> EffectivelyOnceReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
