"""``EntryReader``: the blocking ``AsyncEntryReader`` (``client.entry_reader``, Magnetar's own).

``create_entry_reader(client, topic, start_message_id, ...)`` as the async one, on a blocking
``Client``. ``read_entries`` is one round trip through the client's loop per call, however many
entries it returns: a bulk reader's cost per record is the loop's cost divided by a batch.
"""

from __future__ import annotations

from client.entry_reader import MAX_ENTRIES, AsyncEntryReader
from client.entry_reader import create_entry_reader as create_async_entry_reader
from client.message_id import MessageId
from client.raw_entry import RawEntry
from client.sync.client import Client
from client.sync.runner import Runner

__all__ = ["EntryReader", "create_entry_reader"]


class EntryReader:
    """A blocking reader in entry mode (see ``client.entry_reader``)."""

    def __init__(self, runner: Runner, reader: AsyncEntryReader) -> None:
        self._runner = runner
        self._reader = reader

    def topic(self) -> str:
        return self._reader.topic()

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def read_entries(
        self, max_entries: int = MAX_ENTRIES, timeout_millis: int | None = None
    ) -> list[RawEntry]:
        """As ``AsyncEntryReader.read_entries``."""
        return self._runner.run(self._reader.read_entries(max_entries, timeout_millis))

    def has_message_available(self) -> bool:
        return self._runner.run(self._reader.has_message_available())

    def get_last_message_id(self) -> MessageId:
        return self._runner.run(self._reader.get_last_message_id())

    def seek(self, messageid: MessageId | int) -> None:
        self._runner.run(self._reader.seek(messageid))

    def close(self) -> None:
        self._runner.run(self._reader.close())

    def __repr__(self) -> str:
        return f"<EntryReader on {self.topic()}>"


def create_entry_reader(
    client: Client,
    topic: str,
    start_message_id: MessageId,
    *,
    start_message_id_inclusive: bool = False,
    receiver_queue_size: int = 100,
    **options: object,
) -> EntryReader:
    """As ``client.entry_reader.create_entry_reader``, blocking."""
    runner = client._runner
    reader = runner.run(
        create_async_entry_reader(
            client.async_client,
            topic,
            start_message_id,
            start_message_id_inclusive=start_message_id_inclusive,
            receiver_queue_size=receiver_queue_size,
            **options,
        )
    )
    return EntryReader(runner, reader)
