"""``batch_receive``: the official batch-receive policy, and gathering a batch by it.

As the C++ client: a ``batch_receive`` call returns as soon as the policy's number of
messages or bytes of payload is gathered, or its timeout passed (then with what was gathered,
possibly nothing); a limit below 1 is no limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from client.errors import Timeout
from client.message import Message

__all__ = [
    "DEFAULT_BATCH_RECEIVE_POLICY",
    "BatchReceivePolicy",
    "ConsumerBatchReceivePolicy",
    "gather_batch",
]


class BatchReceivePolicy:
    """The official ``pulsar.BatchReceivePolicy``: when a ``batch_receive`` call completes.

    It completes as soon as ``max_num_messages`` messages, or ``max_num_bytes`` bytes of
    payload, are gathered, or ``timeout_ms`` passed; a limit below 0 is no limit.

    Raises:
        ValueError: no limit at all (the C++ client's ``invalid_argument``).
    """

    __slots__ = ("_max_num_bytes", "_max_num_messages", "_timeout_ms")

    def __init__(
        self,
        max_num_messages: int = -1,
        max_num_bytes: int = 10 * 1024 * 1024,
        timeout_ms: int = 100,
    ) -> None:
        if max_num_messages <= 0 and max_num_bytes <= 0 and timeout_ms <= 0:
            raise ValueError(
                "at least one of max_num_messages, max_num_bytes and timeout_ms must be > 0"
            )
        self._max_num_messages = max_num_messages
        self._max_num_bytes = max_num_bytes
        self._timeout_ms = timeout_ms

    def getMaxNumMessages(self) -> int:  # the official (C++-bound) name
        return self._max_num_messages

    def getMaxNumBytes(self) -> int:  # the official (C++-bound) name
        return self._max_num_bytes

    def getTimeoutMs(self) -> int:  # the official (C++-bound) name
        return self._timeout_ms

    def __repr__(self) -> str:
        return (
            f"BatchReceivePolicy(max_num_messages={self._max_num_messages}, "
            f"max_num_bytes={self._max_num_bytes}, timeout_ms={self._timeout_ms})"
        )


#: The C++ client's default (``BatchReceivePolicy()``): no count limit, 10 MiB, 100 ms.
DEFAULT_BATCH_RECEIVE_POLICY = BatchReceivePolicy()


class ConsumerBatchReceivePolicy:
    """The official ``pulsar.ConsumerBatchReceivePolicy``: ``subscribe(batch_receive_policy=)``
    (see ``BatchReceivePolicy``)."""

    __slots__ = ("_policy",)

    def __init__(self, max_num_message: int, max_num_bytes: int, timeout_ms: int) -> None:
        self._policy = BatchReceivePolicy(max_num_message, max_num_bytes, timeout_ms)

    def policy(self) -> BatchReceivePolicy:
        return self._policy


async def gather_batch(
    receive: Callable[[int | None], Awaitable[Message]],
    check_open: Callable[[], None],
    max_messages: int,
    max_bytes: int,
    timeout_ms: int,
) -> list[Message]:
    """Messages from ``receive(timeout_millis)`` until the limits are met (see the module).

    Raises:
        AlreadyClosed: the consumer is closed (``check_open``), before anything was gathered.
    """
    check_open()
    out: list[Message] = []
    size = 0
    loop = asyncio.get_running_loop()
    deadline = None if timeout_ms <= 0 else loop.time() + timeout_ms / 1000
    while (max_messages <= 0 or len(out) < max_messages) and (max_bytes <= 0 or size < max_bytes):
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            break
        try:
            message = await receive(None if left is None else max(1, int(left * 1000)))
        except Timeout:
            break
        out.append(message)
        size += len(message.data())
    return out
