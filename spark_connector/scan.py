"""Reading one topic partition from a ``Position``: the executors' ``read`` and the planner's count.

A ``PartitionScan`` is a non-durable reader started at the start position's *entry* (inclusive,
whole entry), which skips the batch indexes below the position's index itself: the broker
delivers whole entries, and a position inside a batch (``maxOffsetsPerTrigger`` may cut there)
must resume at that index exactly.

Data loss: every position but ``EARLIEST`` names an entry the connector saw (or a message id a
user gave), so the first message the reader delivers must come from that entry. If it comes
from a later one, the entry is gone (topic deleted, or trimmed by retention ignoring the
connector's cursor): ``DataLoss`` with ``failOnDataLoss=true``, else a warning and the scan goes
on from what exists. The durable cursor (``cursor``) is kept one entry behind the committed
position so retention never trims the entry a restart resumes at.

``iter_range_entries`` is the same range as whole entries (``client.entry_reader``), each with
the batch indexes of it inside the range: the raw-value source's columnar path, which never
makes a ``Message`` per record. Same start, end, data-loss and timeout rules.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from client.errors import Timeout
from client.message import Message
from client.message_id import MessageId
from client.raw_entry import RawEntry
from client.sync import Client, Reader
from client.sync.entry_reader import EntryReader, create_entry_reader
from spark_connector.clients import partition_topics
from spark_connector.positions import EARLIEST, Position
from spark_connector.range_check import RangeTimeout, range_still_exists, range_timeout_message

__all__ = [
    "DataLoss",
    "PartitionScan",
    "iter_range",
    "iter_range_entries",
    "partition_topic",
    "position_after",
    "position_of",
]

logger = logging.getLogger(__name__)


class DataLoss(RuntimeError):
    """Messages a query still needed are gone (the Kafka connector's failOnDataLoss case)."""


def position_of(message: Message) -> Position:
    mid = message.message_id()
    return Position.of_message(mid.ledger_id(), mid.entry_id(), mid.batch_index())


def position_after(message: Message) -> Position:
    mid = message.message_id()
    return Position.after_message(mid.ledger_id(), mid.entry_id(), mid.batch_index())


def data_loss_message(topic: str, what: str) -> str:
    return (
        f"dedup-topic: {what} on {topic}. Some data may have been lost (the topic was deleted "
        "or trimmed by retention). If this is expected, set the source option "
        "failOnDataLoss=false (this may also be a false alarm for a hand-written offset)."
    )


def partition_topic(client: Client, topic: str, partition: int) -> str:
    """The topic holding partition ``partition`` of ``topic`` (itself when not partitioned).

    Raises:
        DataLoss: the topic has fewer partitions than the offsets name (deleted and re-created
            smaller; Pulsar never shrinks a partitioned topic).
    """
    names, _ = partition_topics(client, topic)
    if not 0 <= partition < len(names):
        raise DataLoss(
            data_loss_message(topic, f"partition {partition} is gone ({len(names)} partitions)")
        )
    return names[partition]


class PartitionScan:
    """Messages of one partition in order, from ``start`` (inclusive)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        start: Position,
        *,
        fail_on_data_loss: bool,
        poll_timeout_ms: int,
        receiver_queue_size: int = 1000,
        reader_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self._reader_options = dict(reader_options or {})  # pulsar.reader.* (client_options)
        self.start = start
        self._client = client
        self._fail = fail_on_data_loss
        self._poll_timeout_ms = poll_timeout_ms
        self._queue_size = receiver_queue_size
        self._reader: Reader | None = None
        self._peeked: Message | None = None
        self._peeked_at: tuple[int, int, int] = (0, 0, 0)
        self._checked = start.is_earliest
        # Indexes below the start are skipped only inside the start entry: once a message at
        # or after the start came, no later one is compared (a tuple per message, not more).
        self._past_start = start.is_earliest
        self.next_position = start
        """The position after the last message taken (``start`` before any)."""

    def _open(self) -> Reader:
        if self._reader is None:
            start = self.start
            start_id = (
                MessageId.earliest
                if start.is_earliest
                else MessageId(-1, start.ledger, start.entry, -1)
            )
            options = {"receiver_queue_size": self._queue_size, **self._reader_options}
            self._reader = self._client.create_reader(
                self.topic, start_id, start_message_id_inclusive=True, **options
            )
        return self._reader

    def last_message_id(self) -> MessageId:
        """GET_LAST_MESSAGE_ID of the partition (entry id -1 when it is empty)."""
        return self._open().get_last_message_id()

    def peek(self, *, wait: bool) -> Message | None:
        """The next message without taking it.

        ``wait=False``: None when the broker has nothing more right now. ``wait=True``: wait up
        to ``pollTimeoutMs``, then ``Timeout``.
        """
        while self._peeked is None:
            reader = self._open()
            if not wait and not reader.has_message_available():
                return None
            message = reader.read_next(self._poll_timeout_ms)
            if not self._checked:
                self._checked = True
                self._check_first(message)
            mid = message.message_id()
            index = mid.batch_index()
            at = (mid.ledger_id(), mid.entry_id(), index if index > 0 else 0)
            if not self._past_start:
                if at < self.start:
                    continue  # an index below the start inside the start entry
                self._past_start = True
            self._peeked = message
            self._peeked_at = at
        return self._peeked

    @property
    def peeked_at(self) -> tuple[int, int, int]:
        """``(ledger, entry, batch index)`` of the message ``peek`` returned (a ``Position``'s
        fields, without building one per message)."""
        return self._peeked_at

    def take(self) -> Message:
        """Take the message ``peek`` returned."""
        message = self._peeked
        assert message is not None, "take() without a successful peek()"
        self._peeked = None
        ledger, entry, index = self._peeked_at
        self.next_position = Position(ledger, entry, index + 1)
        return message

    def _check_first(self, message: Message) -> None:
        mid = message.message_id()
        start = self.start
        if (mid.ledger_id(), mid.entry_id()) > (start.ledger, start.entry):
            what = f"entry {start.ledger}:{start.entry} (start {start}) is gone, next is {mid}"
            if self._fail:
                raise DataLoss(data_loss_message(self.topic, what))
            logger.warning("%s", data_loss_message(self.topic, what))

    def close(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            try:
                reader.close()
            except Exception:
                logger.debug("closing a reader of %s failed", self.topic, exc_info=True)


def iter_range(
    client: Client,
    topic: str,
    start: Position,
    end: Position,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    reader_options: Mapping[str, Any] | None = None,
) -> Iterator[Message]:
    """Exactly the messages in ``[start, end)``, in order.

    ``end`` below ``start`` means the partition went back (deleted and re-created): data loss;
    without ``failOnDataLoss`` the range is read from the earliest message instead.

    Raises:
        DataLoss: see the module docstring (with ``failOnDataLoss``).
    """
    if end < start:
        what = f"the end {end} of a batch is before its start {start}"
        if fail_on_data_loss:
            raise DataLoss(data_loss_message(topic, what))
        logger.warning("%s", data_loss_message(topic, what))
        start = EARLIEST
    scan = PartitionScan(
        client,
        topic,
        start,
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=poll_timeout_ms,
        reader_options=reader_options,
    )
    # Compared as plain tuples: a message's position and the one after it (``Position`` is
    # a NamedTuple, so tuple order is its order).
    stop = tuple(end)
    last = (stop[0], stop[1], stop[2] - 1)
    try:
        while True:
            try:
                message = scan.peek(wait=True)
            except Timeout:
                what = f"no message within pollTimeoutMs before the end {end}"
                if range_still_exists(scan.last_message_id(), end):
                    # A slow broker, not lost data: a short range would renumber a replay.
                    raise RangeTimeout(range_timeout_message(topic, end)) from None
                if fail_on_data_loss:
                    raise DataLoss(data_loss_message(topic, what)) from None
                logger.warning("%s", data_loss_message(topic, what))
                return
            assert message is not None
            at = scan.peeked_at
            if at >= stop:
                return
            yield scan.take()
            if at == last:  # the message just before ``end``: do not wait for another
                return
    finally:
        scan.close()


#: Entries an entry reader queues at most (its queue counts entries, and a sink's batch holds
#: hundreds of rows: ``pulsar.reader.receiverQueueSize`` may lower it, not raise it) and hands
#: over per call.
ENTRY_QUEUE_SIZE = 64


def _open_entries(
    client: Client, topic: str, start: Position, reader_options: Mapping[str, Any] | None
) -> EntryReader:
    start_id = (
        MessageId.earliest if start.is_earliest else MessageId(-1, start.ledger, start.entry, -1)
    )
    options = dict(reader_options or {})
    options["receiver_queue_size"] = min(
        options.get("receiver_queue_size", ENTRY_QUEUE_SIZE), ENTRY_QUEUE_SIZE
    )
    return create_entry_reader(client, topic, start_id, start_message_id_inclusive=True, **options)


def _within(entry: RawEntry, start: Position, stop: tuple[int, ...]) -> tuple[list[int], bool]:
    """The indexes of ``entry`` in ``[start, stop)`` (``[0]`` for an entry that is one
    message), and whether the range ends in it (nothing after it is to be read)."""
    key = (entry.ledger_id, entry.entry_id)
    whole = not entry.is_batch or entry.encrypted  # one message: position index 0
    taken = [0] if whole else entry.taken()
    if key == (start.ledger, start.entry):
        taken = [index for index in taken if index >= start.batch]
    if key == stop[:2]:
        return [index for index in taken if index < stop[2]], True
    if key > stop[:2]:
        return [], True
    return taken, False


def iter_range_entries(
    client: Client,
    topic: str,
    start: Position,
    end: Position,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    reader_options: Mapping[str, Any] | None = None,
) -> Iterator[tuple[RawEntry, list[int]]]:
    """The entries holding ``[start, end)``, in order, each with its batch indexes in the range
    (never empty); see ``iter_range`` for the rules.

    Raises:
        DataLoss: see the module docstring (with ``failOnDataLoss``).
    """
    if end < start:
        what = f"the end {end} of a batch is before its start {start}"
        if fail_on_data_loss:
            raise DataLoss(data_loss_message(topic, what))
        logger.warning("%s", data_loss_message(topic, what))
        start = EARLIEST
    reader = _open_entries(client, topic, start, reader_options)
    stop = tuple(end)
    checked = start.is_earliest
    try:
        while True:
            try:
                entries = reader.read_entries(ENTRY_QUEUE_SIZE, poll_timeout_ms)
            except Timeout:
                what = f"no message within pollTimeoutMs before the end {end}"
                if range_still_exists(reader.get_last_message_id(), end):
                    raise RangeTimeout(range_timeout_message(topic, end)) from None
                if fail_on_data_loss:
                    raise DataLoss(data_loss_message(topic, what)) from None
                logger.warning("%s", data_loss_message(topic, what))
                return
            for entry in entries:
                if not checked:
                    checked = True
                    _check_first_entry(topic, entry, start, fail_on_data_loss)
                taken, last = _within(entry, start, stop)
                if taken:
                    yield entry, taken
                if last:  # the end's entry: nothing after it is read (nor waited for)
                    return
    finally:
        try:
            reader.close()
        except Exception:
            logger.debug("closing an entry reader of %s failed", topic, exc_info=True)


def _check_first_entry(topic: str, entry: RawEntry, start: Position, fail: bool) -> None:
    if (entry.ledger_id, entry.entry_id) > (start.ledger, start.entry):
        what = (
            f"entry {start.ledger}:{start.entry} (start {start}) is gone, "
            f"next is {entry.ledger_id}:{entry.entry_id}"
        )
        if fail:
            raise DataLoss(data_loss_message(topic, what))
        logger.warning("%s", data_loss_message(topic, what))
