"""``Reader``: the blocking reader (``pulsar.Reader``'s API) over an ``AsyncReader``.

``Client.create_reader`` takes ``ReaderOptions``' parameters, as ``AsyncClient.create_reader``
does, then the official ``reader_listener`` (``BlockingReaderOptions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from client.arguments import check_type
from client.consumer import ReaderOptions
from client.errors import AlreadyClosed, InvalidConfiguration, OperationNotSupported
from client.message import Message
from client.message_id import MessageId
from client.reader import AsyncMultiTopicReader, AsyncReader
from client.sync.consumer import Consumer
from client.sync.runner import Runner

__all__ = ["BlockingReaderOptions", "Reader", "ReaderListener"]

ReaderListener = Callable[["Reader", Message], None]


@dataclass(frozen=True, slots=True)
class BlockingReaderOptions(ReaderOptions):
    """``create_reader``'s parameters on the blocking client: ``reader_listener`` comes last,
    called as the consumer's ``message_listener`` is, as ``listener(reader, message)``."""

    reader_listener: ReaderListener | None = None


class Reader:
    """Blocking reader (``pulsar.Reader``'s API) over an ``AsyncReader`` (or, on a partitioned
    topic, an ``AsyncMultiTopicReader``)."""

    def __init__(
        self,
        runner: Runner,
        reader: AsyncReader | AsyncMultiTopicReader,
        reader_listener: ReaderListener | None = None,
    ) -> None:
        self._runner = runner
        self._reader = reader
        # One topic: read through the consumer facade's fast path (queued messages are taken
        # without a round trip through the loop: about 6 us a message instead of 90 us).
        self._receiver = (
            Consumer(runner, reader.consumer) if isinstance(reader, AsyncReader) else None
        )
        self._listener = runner.listeners.start(
            f"magnetar-reader-listener-{reader.topic()}", self._read_next, reader_listener, self
        )

    def topic(self) -> str:
        return self._reader.topic()

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """Raises:
        ValueError: ``timeout_millis`` is not an int (the official check).
        """
        if timeout_millis is not None:
            check_type(int, timeout_millis, "timeout_millis")
        if self._listener is not None:
            raise InvalidConfiguration("this reader has a reader listener: it cannot read_next")
        return self._read_next(timeout_millis)

    def _read_next(self, timeout_millis: int | None = None) -> Message:
        if self._receiver is not None:
            return self._receiver._receive(timeout_millis)
        return self._runner.run(self._reader.read_next(timeout_millis))

    def get_last_message_id(self) -> MessageId:
        """The id of the topic's last message (entry id -1: empty); one topic only."""
        reader = self._reader
        if not isinstance(reader, AsyncReader):
            raise OperationNotSupported(
                f"{reader.topic()} is partitioned: ask a reader of each partition"
            )
        return self._runner.run(reader.get_last_message_id())

    def has_message_available(self) -> bool:
        return self._runner.run(self._reader.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        self._runner.run(self._reader.seek(messageid))

    def close(self) -> None:
        try:
            self._runner.run(self._reader.close())
        finally:
            self._runner.listeners.stop(self._listener)

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Message:
        try:
            return self.read_next()
        except AlreadyClosed:
            raise StopIteration from None
