"""An entry's dedup identity: its first and highest sequence id, decided in one place. No I/O.

PIP-6 dedup keys an entry on ``(producer name, first sequence id, highest sequence id)``. The
identity is read from two sources that must agree: the SEND command when the entry arrives
(``of_send``) and the stored ``MessageMetadata`` when dedup replays the log after a restart
(``of_metadata``). Both go through ``highest_sequence_id``, so the publish path and the replay
can never disagree about the range an entry covers. ``exact_batch_highest`` is the rare-path
refinement (an entry whose first id is not above the pushed mark).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol._accel import speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.batch import split_batch
from protocol.errors import RemoteProtocolError
from protocol.metadata import EntryMetadata, parse_entry_metadata

__all__ = [
    "EXACT_SCAN_MAX_MESSAGES",
    "exact_batch_highest",
    "highest_sequence_id",
    "of_metadata",
    "of_send",
    "py_of_send",
]


def highest_sequence_id(sequence_id: int, stated_highest: int | None, num_messages: int) -> int:
    """The highest sequence id an entry covers, for dedup's ``check``.

    A producer that sets ``highest_sequence_id`` (the Java client) states it exactly; Java's
    broker then takes ``max(highest, sequence_id)``, and so do we.

    Deliberate improvement over Java: the C++ core behind the Python client (4.2.0) sends a
    batch with only its *first* sequence id. Java would record just that id, so a batch
    producer re-created after a restart would be told to resume at ``first + 1`` and its next
    ``num_messages - 1`` ids would be dropped as duplicates. We take ``first + num_messages - 1``
    instead. For a batch of increasing ids this never overstates the real highest id (so no
    unseen id is marked as seen); it understates it only when the application chose gapped ids,
    where the exact value is the largest ``SingleMessageMetadata.sequence_id`` of the batch.
    """
    if stated_highest is not None:
        return stated_highest if stated_highest > sequence_id else sequence_id
    return sequence_id + (num_messages if num_messages > 1 else 1) - 1


def py_of_send(send: pb.CommandSend) -> tuple[int, int, int]:
    """``(sequence_id, highest_sequence_id, num_messages)`` of a SEND (num_messages: 1 if absent).

    The highest id comes from the command, as Java's broker reads it (``highest_sequence_id``
    of CommandSend); absent, the batch rule of ``highest_sequence_id`` applies.
    """
    sequence_id = send.sequence_id
    num_messages = send.num_messages  # the proto default is 1
    stated = send.highest_sequence_id if send.HasField("highest_sequence_id") else None
    return sequence_id, highest_sequence_id(sequence_id, stated, num_messages), num_messages


def of_metadata(meta: EntryMetadata) -> tuple[str, int, int]:
    """``(producer_name, sequence_id, highest_sequence_id)`` of a stored entry (dedup replay)."""
    high = highest_sequence_id(meta.sequence_id, meta.highest_sequence_id, meta.num_messages)
    return meta.producer_name, meta.sequence_id, high


EXACT_SCAN_MAX_MESSAGES = 5000
"""Largest batch whose per-message ids ``exact_batch_highest`` reads (its cost is per record).

About 1.5 us per record here, so a batch at the bound costs under 10 ms of the event loop; the
official clients batch at most 1000 messages by default (``batchingMaxMessages``). A larger
batch keeps the estimate, i.e. Java's behaviour (its broker never opens a batch: it trusts the
SEND's ``highest_sequence_id``) improved by ``first + n - 1``; without the bound, a 4 MiB batch
of 700,000 empty records sent at or below the mark kept the loop busy for seconds."""


def exact_batch_highest(entry: bytes, estimate: int) -> int:
    """The largest per-message sequence id inside an uncompressed batch, else ``estimate``.

    Used only on dedup's rare path (an entry whose first id is not above the pushed mark), where
    the exact last id of a batch decides between DUP and storing it: the C++ client sends only
    the first id, and ``first + n - 1`` understates the last id of a batch with gapped ids.
    Compressed or encrypted payloads, batches without per-message ids, and batches of more than
    ``EXACT_SCAN_MAX_MESSAGES`` messages keep the estimate.
    """
    try:
        meta = parse_entry_metadata(entry)
        count = meta.num_messages
        if not meta.is_batch or not 1 < count <= EXACT_SCAN_MAX_MESSAGES or meta.compression:
            return estimate
        # split_batch stops at the first record beyond ``count``: the work is bounded by it.
        records = split_batch(memoryview(entry)[meta.payload_offset :], count)
    except RemoteProtocolError:
        return estimate  # e.g. an encrypted payload: it does not parse as a batch
    first = meta.sequence_id
    highest = first
    for record, _payload in records:
        if not record.HasField("sequence_id"):
            return estimate  # no usable per-message ids: keep the range
        seq = record.sequence_id
        if seq < first:
            return estimate  # ids going backwards: keep the range
        if seq > highest:
            highest = seq
    return highest


_speedups = speedups()
if TYPE_CHECKING:
    of_send = py_of_send
elif _speedups is not None:  # read off the fields the compiled decoder already walked
    of_send = _speedups.bind_send_identity(py_of_send)
else:
    of_send = py_of_send
