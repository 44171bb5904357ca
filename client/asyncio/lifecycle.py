"""What a ``client.asyncio.Client`` shares with the producers, consumers and readers it made:
whether it is closed, and the sends still waiting for their receipts.

``Client.shutdown()`` is a plain method in the official API, callable where nothing can be
awaited. It marks the client closed at once, so every handle refuses new work with
``AlreadyClosed`` from that moment (as the C++ client's shutdown does), and fails every send
still waiting with ``AlreadyClosed``; the sockets are closed by a task it starts on the
client's loop.

A waiting send is failed by cancelling the task that awaits it (and turning that cancellation
into ``AlreadyClosed``), not by relaying the producer's future through one of ours: a relay
would cost every send one more loop turn, and ``send`` would then complete after a ``flush``
that covered it.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from client.asyncio.errors import PulsarException
from client.errors import Result

__all__ = ["ClientState"]

T = TypeVar("T")


class ClientState:
    """The closed flag and the tasks waiting for a send, of one client."""

    def __init__(self) -> None:
        self.closed = False
        self._waiting: set[asyncio.Task[object]] = set()
        self._cut: set[asyncio.Task[object]] = set()  # cancelled by shutdown, not by the caller

    def check_open(self) -> None:
        """Raises ``PulsarException(AlreadyClosed)`` once the client is closed or shut down."""
        if self.closed:
            raise PulsarException(Result.AlreadyClosed, "the client is closed")

    async def wait_for(self, sent: asyncio.Future[T]) -> T:
        """``await sent``, unless the client shuts down first: then ``AlreadyClosed``.

        ``sent`` itself is left alone (the producer owns it and settles it later).
        """
        task = asyncio.current_task()
        if task is None:
            return await sent
        self._waiting.add(task)
        try:
            return await sent
        except asyncio.CancelledError:
            if task not in self._cut:
                raise  # the caller's own cancellation
            self._cut.discard(task)
            task.uncancel()
            raise PulsarException(Result.AlreadyClosed, "the client was shut down") from None
        finally:
            self._waiting.discard(task)

    def fail_waiting(self) -> None:
        """On the client's loop: every task waiting in ``wait_for`` gets ``AlreadyClosed``."""
        waiting, self._waiting = self._waiting, set()
        for task in waiting:
            self._cut.add(task)
            task.cancel()
