"""MESSAGE frames for a run of entries to one consumer, in one buffer (what dispatch writes).

A broker's dispatch sends a consumer a run of stored entries at a time (one read batch); every
frame differs from the next only in the entry's position, its redelivery count and its PIP-54
ack set. ``encode_messages`` builds the whole run into one ``bytes``, so the connection makes
one write of it instead of one per entry.

``py_encode_messages`` is the reference: each frame is exactly what
``protocol.commands.message`` builds (the protobuf encoder decides the bytes). The compiled
``_speedups.encode_messages`` (``protocol/_dispatch.pxi``) writes the same bytes without a
protobuf object per entry, and hands anything it does not take (a redelivery count past 32
bits, an entry shorter than its metadata size, an object that is no buffer) to the reference,
so errors are the reference's. ``tests/protocol/test_dispatch_frames.py`` checks both give the
same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from protocol._accel import speedups
from protocol.commands.consumers import message
from protocol.ids import MessageId

#: One entry of a run: ``((ledger_id, entry_id), entry, redelivery_count, ack_set or None)``.
#: The position is any pair (the broker passes its ``Position`` named tuple as it is).
RunItem = tuple[tuple[int, int], bytes, int, Sequence[int] | None]


def py_encode_messages(consumer_id: int, partition: int, run: Sequence[RunItem]) -> bytes:
    """The MESSAGE frames (magic and CRC-32C included) of ``run`` to ``consumer_id``, in order.

    ``partition`` is the topic's partition index, or -1 for a non-partitioned topic (then the
    message ids carry none, as Pulsar's broker writes them).
    """
    return b"".join(
        message(
            consumer_id,
            MessageId(position[0], position[1], partition),
            entry,
            redelivery_count,
            ack_set,
        )
        for position, entry, redelivery_count, ack_set in run
    )


_speedups = speedups()
if TYPE_CHECKING:
    encode_messages = py_encode_messages
elif _speedups is not None:
    encode_messages = _speedups.bind_dispatch(py_encode_messages)
else:
    encode_messages = py_encode_messages
