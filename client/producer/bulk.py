"""The bulk send path: many rows, given as columns, sent as whole batch entries (Magnetar's own
API, not the official client's).

``send`` / ``send_async`` cost a message object, a future and a callback per message; a sender
that already holds its messages as columns (the Spark sink: Arrow columns turned into lists)
pays that for nothing. ``send_rows`` takes the columns and the first sequence id and builds the
batch entries straight from them (``protocol.batch_builder.pack_records``: every record of a
batch serialized in one pass, compiled), then queues the entries in the producer's pending
queue like any other SEND. So:

* **Dedup stays exact.** An entry's metadata and SEND carry ``sequence_id`` = its first row's id
  and ``highest_sequence_id`` = its last row's; the entry stays pending, frame and all, until
  its receipt, and a reconnection writes it again unchanged, in order (``client.pending``).
  Row ``i`` has id ``first_sequence_id + i``, or ``sequence_ids[i]`` (increasing); with
  neither, the producer's next ids (as ``send`` without ``sequence_id``), taken when the rows
  are queued.
* **Entries are cut deterministically**: at most ``max_messages`` rows and ``max_bytes`` bytes
  of records each (default: the producer's ``batching_max_messages`` and
  ``batching_max_allowed_size_in_bytes``, whether or not it batches its ``send`` calls), and
  never over the broker's ``maxMessageSize`` once compressed (an entry that would be is cut
  in half again, and again). The same rows and limits give the same entries, which a replay
  that must be dropped as duplicates entry by entry relies on.
* **All or nothing at the call**: every entry is built before any is queued; a row that alone
  exceeds ``maxMessageSize`` raises ``MessageTooBig`` and nothing is sent, as ``send``
  refuses such a message.
* **One completion per call**: it completes once every entry is answered, with a
  ``BulkReceipt`` (each entry's id and row count; an id ``-1:-1`` marks an entry the broker
  already had: PIP-6 duplicate), or with the first entry's error.

Rows queue after anything the producer's batch container holds (it is sent first, keeping
sequence order) and count ``rows`` toward ``max_pending_messages``: a call waits for room (with
``block_if_queue_full``) while the queue is full, then goes in whole. Compression follows the
producer's ``compression_type``; encryption is not supported here (``OperationNotSupported``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from client.accumulator import EntryContext
from client.batching import BuiltEntry, compress_payload
from client.errors import MessageTooBig, OperationNotSupported, PulsarException
from client.message_id import MessageId
from client.pending import SendOp
from client.producer.config import ProducerConfig
from protocol import pb
from protocol.batch_builder import pack_records
from protocol.metadata import encode_entry

__all__ = [
    "BulkCompletion",
    "BulkHost",
    "BulkReceipt",
    "BulkSendApi",
    "Rows",
    "build_entries",
    "numbered",
    "prepare_rows",
    "send_ops",
]

# Room kept in an entry for its batch MessageMetadata beyond the producer's name and schema
# version (ids, times, counts, codec); an entry still too large is cut again.
_METADATA_ROOM = 64


@dataclass(frozen=True, slots=True)
class Rows:
    """The columns of one ``send_rows`` call (see the module docstring); a column left None
    means no value in any row."""

    payloads: Sequence[bytes | None]
    first_sequence_id: int = 0
    sequence_ids: Sequence[int] | None = None
    keys: Sequence[str | None] | None = None
    properties: Sequence[Mapping[str, str] | None] | None = None
    event_times: Sequence[int | None] | None = None

    def sequence_id(self, row: int) -> int:
        ids = self.sequence_ids
        return self.first_sequence_id + row if ids is None else ids[row]


@dataclass(frozen=True, slots=True)
class BulkReceipt:
    """The outcome of one ``send_rows`` call.

    Attributes:
        message_ids: one per entry, in order (``-1:-1``: the broker already had it).
        rows: the rows of each entry.
    """

    message_ids: tuple[MessageId, ...]
    rows: tuple[int, ...]

    @property
    def stored_rows(self) -> int:
        """Rows stored by this call."""
        return sum(n for i, n in zip(self.message_ids, self.rows, strict=True) if i.entry_id() >= 0)

    @property
    def duplicate_rows(self) -> int:
        """Rows the broker dropped as duplicates (an earlier attempt stored them)."""
        return sum(self.rows) - self.stored_rows


def build_entries(
    context: EntryContext,
    rows: Rows,
    *,
    max_messages: int,
    max_bytes: int,
    publish_time: int,
) -> list[BuiltEntry]:
    """The batch entries of ``rows``, cut as the module docstring says.

    Raises:
        MessageTooBig: a row that alone exceeds the broker's limit.
        ValueError, TypeError: bad columns (``pack_records``).
    """
    limit = context.max_message_size()
    room = _METADATA_ROOM + len(context.producer_name.encode())
    room += len(context.schema_version or b"")
    bound = max(1, min(max_bytes, limit - room))
    entries: list[BuiltEntry] = []
    start, count, cap = 0, len(rows.payloads), max_messages
    while start < count:
        records, stop = pack_records(
            rows.payloads,
            rows.first_sequence_id,
            start,
            cap,
            bound,
            rows.keys,
            rows.properties,
            rows.event_times,
            rows.sequence_ids,
        )
        built = _entry(context, rows, records, start, stop, publish_time)
        if len(built.entry) - 4 <= limit:
            entries.append(built)
            start, cap = stop, max_messages
        elif stop - start > 1:
            cap = (stop - start) // 2  # compression or the metadata made it too large
        else:
            raise MessageTooBig(
                f"row {start}: an entry of {len(built.entry) - 4} bytes (metadata and "
                f"payload) exceeds the broker's limit {limit}"
            )
    return entries


def _entry(
    context: EntryContext, rows: Rows, records: bytes, start: int, stop: int, publish_time: int
) -> BuiltEntry:
    """Rows ``start:stop`` (packed in ``records``) as one batch entry, as ``BatchBuilder``
    makes it: the first row's key on the entry, the whole payload compressed."""
    first, highest = rows.sequence_id(start), rows.sequence_id(stop - 1)
    metadata = pb.MessageMetadata(
        producer_name=context.producer_name,
        sequence_id=first,
        publish_time=publish_time,
        num_messages_in_batch=stop - start,
        highest_sequence_id=highest,
    )
    key = rows.keys[start] if rows.keys is not None else None
    if key is not None:
        metadata.partition_key = key
    if context.schema_version is not None:
        metadata.schema_version = context.schema_version
    payload = compress_payload(metadata, records, context.codec)
    return BuiltEntry(
        entry=encode_entry(metadata, payload),
        sequence_id=first,
        highest_sequence_id=highest,
        num_messages=stop - start,
        is_batch=True,
        uncompressed_size=len(records),
    )


Done = Callable[[BulkReceipt | None, PulsarException | None], None]


class BulkCompletion:
    """One call's completion: ``done(receipt, None)`` or ``done(None, first_error)`` once every
    entry is answered (so the call's queue slots are all free by then)."""

    __slots__ = ("_done", "_error", "_ids", "_left", "_rows")

    def __init__(self, rows: list[int], done: Done) -> None:
        self._rows = tuple(rows)
        self._ids: list[MessageId | None] = [None] * len(rows)
        self._left = len(rows)
        self._error: PulsarException | None = None
        self._done = done

    def entry(self, index: int) -> _EntryCompletion:
        """The ``pending.Completion`` of entry ``index``."""
        return _EntryCompletion(self, index)

    def _answered(
        self, index: int, message_id: MessageId | None, error: BaseException | None
    ) -> None:
        self._ids[index] = message_id
        if error is not None and self._error is None:
            self._error = (
                error if isinstance(error, PulsarException) else PulsarException(repr(error))
            )
        self._left -= 1
        if self._left:
            return
        if self._error is not None:
            self._done(None, self._error)
            return
        ids = tuple(i for i in self._ids if i is not None)
        self._done(BulkReceipt(ids, self._rows), None)


class _EntryCompletion:
    __slots__ = ("_finished", "_index", "_owner")

    def __init__(self, owner: BulkCompletion, index: int) -> None:
        self._owner = owner
        self._index = index
        self._finished = False

    def done(self) -> bool:
        return self._finished

    def set_result(self, result: MessageId, /) -> None:
        self._finished = True
        self._owner._answered(self._index, result, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self._finished = True
        self._owner._answered(self._index, None, exception)


def send_ops(entries: list[BuiltEntry], producer_id: int, done: Done) -> list[SendOp]:
    """The pending-queue operations of a call's entries, reporting to one ``done``."""
    completion = BulkCompletion([e.num_messages for e in entries], done)
    return [
        SendOp(
            built.sequence_id,
            built.send(producer_id),
            [completion.entry(index)],
            built.highest_sequence_id,
            permits=built.num_messages,
        )
        for index, built in enumerate(entries)
    ]


class BulkHost(Protocol):
    """What the bulk path needs from a producer (``AsyncProducer``)."""

    _config: ProducerConfig
    _next_sequence_id: int

    def entry_context(self) -> EntryContext: ...

    async def wait_for_room(self) -> None: ...

    def enqueue_ops(self, ops: list[SendOp]) -> None: ...


def numbered(producer: BulkHost, rows: Rows, first_sequence_id: int | None) -> Rows:
    """``rows`` numbered from ``first_sequence_id``, or (None, and no ``sequence_ids``) from
    the producer's next id: call this on its loop, right before queueing."""
    if first_sequence_id is None:
        first_sequence_id = producer._next_sequence_id if rows.sequence_ids is None else 0
    return replace(rows, first_sequence_id=first_sequence_id)


def prepare_rows(
    producer: BulkHost,
    rows: Rows,
    max_messages: int | None,
    max_bytes: int | None,
) -> list[BuiltEntry]:
    """The entries of ``rows`` for ``producer`` (any thread: reads, never changes it).

    Raises:
        OperationNotSupported: the producer encrypts.
        MessageTooBig, ValueError, TypeError: see ``build_entries``.
    """
    config = producer._config
    if config.encryption_keys:
        raise OperationNotSupported("send_rows does not encrypt; use send_async")
    if not rows.payloads:
        return []
    first = rows.first_sequence_id
    if not isinstance(first, int) or first < 0:
        raise ValueError(f"first_sequence_id must be an int >= 0, not {first!r}")
    return build_entries(
        producer.entry_context(),
        rows,
        max_messages=config.batching_max_messages if max_messages is None else max_messages,
        max_bytes=(config.batching_max_allowed_size_in_bytes if max_bytes is None else max_bytes),
        publish_time=int(time.time() * 1000),
    )


class BulkSendApi:
    """``send_rows`` for ``AsyncProducer``."""

    async def send_rows(
        self: BulkHost,
        payloads: Sequence[bytes | None],
        first_sequence_id: int | None = None,
        *,
        sequence_ids: Sequence[int] | None = None,
        keys: Sequence[str | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
        event_times: Sequence[int | None] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> asyncio.Future[BulkReceipt]:
        """Queue rows given as columns as batch entries; the future completes once all are
        answered (``client.producer.bulk``). Waits for room first when the queue is full and
        ``block_if_queue_full`` is on.

        Raises:
            MessageTooBig: a row alone exceeds the broker's limit (nothing is queued).
            ProducerQueueIsFull: no room and ``block_if_queue_full`` off.
            OperationNotSupported: the producer encrypts.
            ValueError, TypeError: bad columns.
        """
        rows = Rows(payloads, 0, sequence_ids, keys, properties, event_times)
        await self.wait_for_room()
        # No await from here on: the ids taken are the producer's until queued.
        rows = numbered(self, rows, first_sequence_id)
        entries = prepare_rows(self, rows, max_messages, max_bytes)
        future: asyncio.Future[BulkReceipt] = asyncio.get_running_loop().create_future()
        if not entries:
            future.set_result(BulkReceipt((), ()))
            return future

        def done(receipt: BulkReceipt | None, error: PulsarException | None) -> None:
            if future.done():
                return
            if receipt is not None:
                future.set_result(receipt)
            else:
                future.set_exception(error or PulsarException("no receipt"))

        self.enqueue_ops(send_ops(entries, self.entry_context().producer_id, done))
        return future
