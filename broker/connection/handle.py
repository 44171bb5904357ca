"""``ConnectionHandle``: what a connection's endpoints may ask of the connection they serve.

The producer and consumer endpoints (``producers.py``, ``consumers.py``) and the authentication
handshake (``broker/auth/handshake.py``) are parts of one ``ServerConnection`` (``core.py``),
which builds them and routes frames to them. They are typed against this protocol rather than
the class, so every import points down: the core imports its parts, never the reverse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.auth.authorization import Authorizer
    from broker.service import BrokerService
    from protocol.topic_name import TopicName


class ConnectionHandle(Protocol):
    """One client connection as its endpoints see it: output, requests, flow control."""

    reading_paused: bool
    client_version: str

    @property
    def service(self) -> BrokerService: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def closing(self) -> bool: ...

    @property
    def peer(self) -> str: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    @property
    def authorizer(self) -> Authorizer: ...

    @property
    def role(self) -> str | None:
        """The authenticated role (``ConnectionAuth.role``)."""
        ...

    @property
    def original_principal(self) -> str | None:
        """The client a proxy role connects for (CONNECT ``original_principal``), else None."""
        ...

    def finish_in_turns(self, step: Callable[[], bool]) -> None:
        """Call ``step`` once per later turn, before anything else is decoded, until True."""
        ...

    def connect_finished(self, accepted: bool) -> None:
        """A CONNECT whose check ran on the pool is done (``ConnectionAuth``)."""
        ...

    def write(self, frame: bytes) -> None: ...

    def close(self) -> None: ...

    def refuse_after(self, delay: float, frame: bytes) -> None: ...

    async def check_alive(self) -> bool: ...

    def spawn(self, coro: Awaitable[None]) -> None: ...

    def reply_error(self, request_id: int, exc: BaseException) -> None: ...

    def request(self, request_id: int, work: Callable[[], Awaitable[None]]) -> None: ...

    def parse_topic(self, name: str) -> TopicName: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def is_writable(self) -> bool: ...
