"""``AsyncEntryReader``: a reader that hands out whole entries, for bulk consumers.

Magnetar's own API (the official clients have no such thing): ``create_entry_reader(client,
topic, start_message_id, ...)`` takes ``create_reader``'s parameters and gives a reader of one
topic (a partition, or a topic that is not partitioned) whose ``read_entries(max_entries,
timeout_millis)`` returns received entries as ``RawEntry`` objects: position, redelivery count,
``MessageMetadata``, payload (decompressed; a batch's records still packed), message count and
which indexes are the reader's. No ``Message`` is made per record: a bulk reader (the Spark
source) splits batches into columns itself (``protocol.batch_columns``).

Reader semantics are those of ``AsyncReader``, on entries: the start (inclusive or not, inside
batches too) is given as ``RawEntry.first_index``; ``has_message_available``, ``seek`` and
resuming after a reconnection work from the last record of the last entry handed out. Flow
control: the broker counts an entry's messages as permits; a queued entry holds one of them
and gives the others back on arrival, so ``receiver_queue_size`` bounds the entries queued
(not the messages): give a smaller one than for messages when batches are large.
"""

from __future__ import annotations

import os
from typing import cast

from client.client import AsyncClient
from client.consumer import AsyncConsumer, ReaderOptions
from client.errors import InvalidConfiguration
from client.message import Message
from client.message_id import MessageId
from client.raw_entry import RawEntry
from client.reader import AsyncReader

__all__ = ["AsyncEntryReader", "create_entry_reader"]

#: ``read_entries``'s default: entries handed out per call at most.
MAX_ENTRIES = 64


class AsyncEntryReader(AsyncReader):
    """A reader in entry mode; create it with ``create_entry_reader``."""

    async def read_entries(
        self, max_entries: int = MAX_ENTRIES, timeout_millis: int | None = None
    ) -> list[RawEntry]:
        """The next entries: at least one (waiting up to ``timeout_millis``, None: forever),
        then up to ``max_entries`` of those already received.

        Raises:
            Timeout: nothing came in time.
            AlreadyClosed: the reader is (or gets) closed.
        """
        consumer = self._consumer
        entries = [_entry(await consumer.receive(timeout_millis))]
        while len(entries) < max_entries:
            more = consumer.receive_nowait()
            if more is None:
                break
            entries.append(_entry(more))
        return entries

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        raise InvalidConfiguration("an entry reader hands out entries: call read_entries")


def _entry(item: Message) -> RawEntry:
    # The receiver queue is typed for messages; in entry mode it holds entries.
    return cast(RawEntry, item)


def _entry_mode(consumer: AsyncConsumer) -> None:
    consumer._entries.deliver_entries()
    if not consumer.zero_queue:  # the consumer's ``on_message`` is the decoder's, bound
        consumer.on_message = consumer._entries.on_message  # type: ignore[method-assign]


async def create_entry_reader(
    client: AsyncClient,
    topic: str,
    start_message_id: MessageId,
    *,
    start_message_id_inclusive: bool = False,
    receiver_queue_size: int = 100,
    **options: object,
) -> AsyncEntryReader:
    """An entry reader of ``topic`` from ``start_message_id``; ``options``: the rest of
    ``create_reader``'s parameters (``reader_name``, ``crypto_key_reader``, ...).

    Raises:
        InvalidConfiguration: ``topic`` is partitioned (read each partition), or a bad option.
        ValueError: an option of the wrong type (``ReaderOptions``'s checks).
    """
    reader_options = ReaderOptions(
        topic,
        start_message_id,
        receiver_queue_size=receiver_queue_size,
        start_message_id_inclusive=start_message_id_inclusive,
        **options,  # type: ignore[arg-type]
    )
    names = await client.get_topic_partitions(topic)
    if len(names) != 1 or names[0].rsplit("/", 1)[-1] != topic.rsplit("/", 1)[-1]:
        raise InvalidConfiguration(f"{topic} is partitioned: read each partition on its own")
    config = reader_options.consumer_config(f"reader-{os.urandom(5).hex()}")
    consumer = await client._start_consumer(names[0], config, prepare=_entry_mode)
    reader = AsyncEntryReader(consumer)
    try:
        await reader.include_head()
    except BaseException:
        await reader.close()
        raise
    return reader
