"""``AsyncTableView``: a topic read as a key -> latest value map (the official ``TableView``).

Like the Java and C++ clients, a table view is a compacted reader (``is_read_compacted``) from
the earliest message: creation reads until ``has_message_available()`` says there is nothing
more, so the returned view already holds the topic's state; a background task keeps reading and
applies every later message. The key is the message key (``partition_key``); a message with an
empty payload (a null value) removes its key, which is compaction's own rule, so the view is the
same whether or not the broker has compacted the topic yet. Messages without a key are skipped.

Listeners (``for_each_and_listen``, ``listen``) are called on the client's event loop with
``(key, value)`` for every update after the current state, in topic order; a removal is not
reported (as the C++ client). Values are payload bytes, or the schema's decoded value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, ItemsView, Iterator
from typing import Any

from client.errors import AlreadyClosed
from client.message import Message
from client.reader import AsyncMultiTopicReader, AsyncReader

__all__ = ["AsyncTableView"]

logger = logging.getLogger(__name__)

Listener = Callable[[str, Any], None]


class AsyncTableView:
    """The latest value of every key of a topic; create it with
    ``AsyncClient.create_table_view``."""

    def __init__(self, reader: AsyncReader | AsyncMultiTopicReader, decode: bool) -> None:
        self._reader = reader
        self._decode = decode
        self._data: dict[str, Any] = {}
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> AsyncTableView:
        """Read the current state (up to the last message now), then follow the topic."""
        while await self._reader.has_message_available():
            self._apply(await self._reader.read_next())
        self._task = asyncio.create_task(self._follow(), name=f"table view {self.topic()}")
        return self

    def topic(self) -> str:
        return self._reader.topic()

    async def _follow(self) -> None:
        while True:
            try:
                message = await self._reader.read_next()
            except AlreadyClosed:
                return
            self._apply(message)

    def _apply(self, message: Message) -> None:
        key = message.partition_key()
        if not key:
            return
        data = message.data()
        if not data:
            self._data.pop(key, None)
            return
        value = message.value() if self._decode else data
        self._data[key] = value
        for listener in list(self._listeners):
            try:
                listener(key, value)
            except Exception:
                logger.exception("table view %s: a listener failed", self.topic())

    # --- the map ----------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def items(self) -> ItemsView[str, Any]:
        return self._data.items()

    def snapshot(self) -> dict[str, Any]:
        """A copy of the current map (the C++ client's ``snapshot``)."""
        return dict(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def for_each(self, action: Listener) -> None:
        for key, value in list(self._data.items()):
            action(key, value)

    def listen(self, action: Listener) -> None:
        """Call ``action`` for every later update."""
        self._listeners.append(action)

    def for_each_and_listen(self, action: Listener) -> None:
        """``for_each`` on the current state, then ``listen`` (nothing missed in between: both
        run on the event loop, where updates are applied)."""
        self.for_each(action)
        self.listen(action)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._reader.close()
