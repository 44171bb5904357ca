"""Acknowledgements: ACKs applied to the cursor, PIP-54 batch-index ack sets included.

The cursor (``broker.storage.Cursor``) holds what is acknowledged; after each ack the in-flight
bookkeeping (``broker.dispatch.in_flight``) is brought in line with it.

Rules this module keeps:

1. PIP-54 (``DispatchLimits.batch_index_ack``, Pulsar's ``acknowledgmentAtBatchIndexLevelEnabled``):
   an ACK whose ``ack_set`` still has set bits acknowledges only the cleared indexes; the cursor
   ANDs it into what it holds (it never rolls back, Pulsar #18042) and turns an all-clear set into
   an entry ack that can move the mark-delete. A partially acknowledged entry is always sent with
   the cursor's ``ack_set`` (redelivery, another Shared consumer, reconnect, restart) so the client
   skips the acknowledged indexes. With the flag off, partial acks are ignored and whole batches
   are redelivered (Java's baseline, B5).
2. Indexes the topic hides (issue #16, ``broker.publish.idempotency_window``) count as
   acknowledged in a client's ack set: the client never saw them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.dispatch.entry_source import EntrySource
from broker.dispatch.in_flight import InFlightEntries
from broker.publish.idempotency_window import visible_ack_set
from broker.storage import Cursor, InvalidPositionError, Position

_WORD_MASK = (1 << 64) - 1


def unacked_indexes(ack_set: Sequence[int], batch_size: int) -> int:
    """How many of indexes ``0 .. batch_size-1`` a PIP-54 ack set marks unacknowledged.

    ``ack_set`` holds Java ``BitSet`` words (bit i in word i // 64, set = unacknowledged);
    words may be signed int64 as they come off the wire. Bits past the batch are ignored: a
    client cannot make an entry look bigger than it is.
    """
    count = 0
    for word_index, word in enumerate(ack_set):
        first = word_index * 64
        if first >= batch_size:
            break
        bits = word & _WORD_MASK
        if batch_size - first < 64:
            bits &= (1 << (batch_size - first)) - 1
        count += bits.bit_count()
    return count


def hidden_indexes(source: EntrySource, position: Position) -> int:
    """Bitmask of the batch indexes of ``position`` the topic hides from every subscription
    and reader (issue #16, ``broker.publish.idempotency_window``); 0 for a source without
    any."""
    hidden_of = getattr(source, "hidden_indexes", None)
    return 0 if hidden_of is None else int(hidden_of(position))


def _clear_hidden(source: EntrySource, position: Position, ack_set: list[int]) -> list[int]:
    """An ack set from a client with the hidden indexes counted as acknowledged: the client
    never saw them, so its acks alone must be able to complete the entry."""
    hidden = hidden_indexes(source, position)
    if not hidden:
        return ack_set
    return visible_ack_set(ack_set, hidden, len(ack_set) * 64)


class Acknowledgements:
    """Applies one subscription's ACKs to its cursor and in-flight entries."""

    def __init__(
        self,
        cursor: Cursor,
        in_flight: InFlightEntries,
        forget: Callable[[Position], None],
        *,
        batch_index_ack: bool,
    ) -> None:
        """``forget``: drop every trace of a fully acknowledged entry (in flight, held)."""
        self._cursor = cursor
        self._in_flight = in_flight
        self._forget = forget
        self._batch_index_ack = batch_index_ack

    def individual(
        self, source: EntrySource, acks: list[tuple[Position, list[int] | None]]
    ) -> None:
        """Individual acks; an ``ack_set`` with set bits (PIP-54) acknowledges only the cleared
        indexes. The same entry may appear several times in one ACK (the client sends the
        batch's current bitset each time); ANDing makes that harmless.
        """
        last = source.last_confirmed_position()
        whole: list[Position] = []
        for position, ack_set in acks:
            if position > last:
                # Names no durable entry: a confused client. Java ignores it too.
                continue
            if ack_set and any(ack_set):
                ack_set = _clear_hidden(source, position, ack_set)
            if ack_set and any(ack_set):
                if not self._batch_index_ack:
                    # Flag off: Java's cursor ignores a partial ack; the batch stays unacked
                    # until the client acks the entry whole (B5 baseline).
                    continue
                self._cursor.delete_batch_indexes(position, ack_set)
                self._settle(position)
            else:
                # No ack_set, or an all-clear one: the whole entry is acknowledged.
                whole.append(position)
        if whole:
            # In one call: the cursor moves its mark-delete once per ACK, not once per id. The
            # order against the partial acks above does not matter: a deleted entry drops its
            # held ack set, and a partial ack of a deleted entry is ignored.
            self._cursor.delete(whole)
            for position in whole:
                self._settle(position)

    def cumulative(
        self, source: EntrySource, position: Position, ack_set: list[int] | None
    ) -> bool:
        """Everything up to ``position`` is consumed; with an ``ack_set`` (PIP-54) the entries
        before ``position`` fully and ``position`` itself only in its cleared indexes. False:
        ``position`` names no durable entry, and the ack is ignored.

        With the flag off a partial cumulative ack moves the mark-delete to the entry before
        (Java: ``getPreviousPosition``), so that batch is redelivered whole.
        """
        if position > source.last_confirmed_position():
            return False
        if ack_set and any(ack_set):
            ack_set = _clear_hidden(source, position, ack_set)
        if ack_set and any(ack_set):
            self.mark_delete_through(position.previous())
            if self._batch_index_ack:
                self._cursor.delete_batch_indexes(position, ack_set)
        else:
            self.mark_delete_through(position)
        self.forget_deleted()
        self._settle(position)
        return True

    def mark_delete_through(self, position: Position) -> None:
        if position > self._cursor.mark_delete_position:
            try:
                self._cursor.mark_delete(position)
            except InvalidPositionError:
                # Names no durable entry (e.g. 0:0 after a seek below the first ledger): Java
                # ignores an ack it cannot apply. Raised here, it would kill the connection.
                return

    def forget_deleted(self) -> None:
        """Drop the in-flight entries the cursor now counts as acknowledged (a mark-delete
        moved past them)."""
        for done in [p for p in self._in_flight.entries if self._cursor.is_deleted(p)]:
            self._forget(done)

    def _settle(self, position: Position) -> None:
        """Bring the in-flight bookkeeping of ``position`` in line with the cursor after an ack."""
        if self._cursor.is_deleted(position):
            self._forget(position)
            return
        flight = self._in_flight.entries.get(position)
        held = self._cursor.batch_ack_set(position)
        if flight is None or held is None:
            return
        remaining = unacked_indexes(held, flight.batch_size)
        if remaining == 0:
            # Only bits past the end of the batch are left set: every real index is acked.
            self._cursor.delete([position])
            self._forget(position)
        elif remaining < flight.unacked:
            flight.consumer.unacked_messages -= flight.unacked - remaining
            flight.unacked = remaining
