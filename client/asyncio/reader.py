"""``Reader`` of ``client.asyncio``: the official ``pulsar.asyncio.Reader`` over ours.

``read_next``, ``has_message_available``, ``seek`` and ``close`` are coroutines; ``topic()`` and
``is_connected()`` are plain, as in the official module.
"""

from __future__ import annotations

from client.asyncio.errors import translated
from client.asyncio.lifecycle import ClientState
from client.message import Message
from client.message_id import MessageId
from client.reader import AsyncMultiTopicReader, AsyncReader

__all__ = ["Reader"]


class Reader:
    """Reads a topic from a chosen message id; create it with ``Client.create_reader``."""

    def __init__(self, reader: AsyncReader | AsyncMultiTopicReader, state: ClientState) -> None:
        self._reader = reader
        self._state = state

    async def read_next(self) -> Message:
        """The next message (waits as long as it takes)."""
        self._state.check_open()
        with translated():
            return await self._reader.read_next()

    async def has_message_available(self) -> bool:
        """Whether ``read_next`` would return a message without waiting for a new one."""
        self._state.check_open()
        with translated():
            return await self._reader.has_message_available()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move to a message id (``start_message_id_inclusive`` decides whether that message
        is read again) or to a publish time (ms since the epoch).

        Raises:
            ValueError: ``messageid`` is neither a ``MessageId`` nor an ``int``.
        """
        if not isinstance(messageid, MessageId | int):
            raise ValueError(f"invalid messageid type {type(messageid)}")
        self._state.check_open()
        with translated():
            await self._reader.seek(messageid)

    async def close(self) -> None:
        """Close the reader; closing it again does nothing."""
        with translated():
            await self._reader.close()

    def topic(self) -> str:
        return self._reader.topic()

    def is_connected(self) -> bool:
        return not self._state.closed and self._reader.is_connected()

    def __repr__(self) -> str:
        return f"<client.asyncio.Reader {self._reader!r}>"
