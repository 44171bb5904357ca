"""Which messages of a batch entry are still unacknowledged (PIP-54), for one consumer.

The broker acknowledges *entries*; a batch entry holds several messages. The official clients
keep, per batch they delivered, the set of indexes the application has not acknowledged yet:

* without batch-index acks, the entry is acknowledged once that set is empty (nothing is sent
  before: the broker would take a partial ack for a whole one);
* with ``batch_index_ack_enabled``, every acknowledgement sends the entry with an ``ack_set``:
  a Java ``BitSet`` as ``long[]`` words in which **a set bit is an index still unacknowledged**;
  an empty set acknowledges the whole entry.

Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from client.message_id import MessageId
from protocol.ids import MessageId as WireMessageId

__all__ = ["BatchAcks", "EntryKey", "ack_set_words", "entry_key", "unacked_indexes", "wire_entry"]

EntryKey = tuple[int, int]
"""(ledger id, entry id) of an entry."""


def entry_key(message_id: MessageId | WireMessageId) -> EntryKey:
    """The entry a message id points into."""
    if isinstance(message_id, MessageId):
        return (message_id.ledger_id(), message_id.entry_id())
    return (message_id.ledger_id, message_id.entry_id)


def wire_entry(key: EntryKey) -> WireMessageId:
    """The protocol id of a whole entry (what ACK and REDELIVER take)."""
    return WireMessageId(key[0], key[1])


def ack_set_words(indexes: Iterable[int], batch_size: int) -> list[int]:
    """The Java ``BitSet.toLongArray()`` words with bit ``i`` set for each index (unsigned)."""
    words = [0] * ((batch_size + 63) // 64)
    for index in indexes:
        words[index >> 6] |= 1 << (index & 63)
    return words


def unacked_indexes(ack_set: Iterable[int], batch_size: int) -> set[int]:
    """Indexes a broker's MESSAGE ``ack_set`` says are still to deliver (all when empty)."""
    words = [word & 0xFFFF_FFFF_FFFF_FFFF for word in ack_set]
    if not words:
        return set(range(batch_size))
    return {
        index
        for index in range(batch_size)
        if (index >> 6) < len(words) and words[index >> 6] >> (index & 63) & 1
    }


class BatchAcks:
    """Unacknowledged indexes of every batch entry delivered to the application."""

    __slots__ = ("_batches",)

    def __init__(self) -> None:
        self._batches: dict[EntryKey, tuple[int, set[int]]] = {}

    def __len__(self) -> int:
        return len(self._batches)

    def delivered(self, key: EntryKey, batch_size: int, unacked: set[int]) -> None:
        """A batch entry arrived (again): these indexes are the ones to be acknowledged."""
        self._batches[key] = (batch_size, set(unacked))

    def ack(self, key: EntryKey, index: int, batch_size: int) -> set[int]:
        """Acknowledge one index; return the indexes still unacknowledged (empty: all done).

        A batch not tracked (already completed, or delivered before a restart of the
        bookkeeping) is taken as entirely unacknowledged.
        """
        tracked = self._batches.get(key)  # no eager default: it would cost O(batch) per ack
        size, unacked = tracked if tracked is not None else (batch_size, set(range(batch_size)))
        unacked.discard(index)
        if unacked and tracked is not None:
            return unacked  # updated in place
        if unacked:
            self._batches[key] = (size, unacked)
        else:
            self._batches.pop(key, None)
        return unacked

    def ack_up_to(self, key: EntryKey, index: int, batch_size: int) -> set[int]:
        """Acknowledge indexes ``0..index`` of ``key`` and forget every earlier batch."""
        for earlier in [k for k in self._batches if k < key]:
            del self._batches[earlier]
        size, unacked = self._batches.get(key, (batch_size, set(range(batch_size))))
        unacked = {i for i in unacked if i > index}
        if unacked:
            self._batches[key] = (size, unacked)
        else:
            self._batches.pop(key, None)
        return unacked

    def clear(self) -> None:
        self._batches.clear()

    def forget(self, key: EntryKey) -> None:
        self._batches.pop(key, None)
