"""Positions in a ledger: ``(ledger_id, entry_id)`` as in Pulsar.

A *ledger* is one segment file; ledger ids increase and are never reused for durable data, and
entry ids restart at 0 in every ledger. Positions order lexicographically, so plain tuple
comparison is the log order.

An ``entry_id`` of -1 is legal and means "just before entry 0 of that ledger": Pulsar uses
``(ledger, -1)`` as the mark-delete position of a cursor that has consumed nothing, and so do we.
"""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A point in the log; ordered by ``(ledger_id, entry_id)``."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    def previous(self) -> Position:
        """The position just before this one in the same ledger (``(l, e-1)``).

        It may name no stored entry (``(l, -1)``); every consumer of positions treats a position
        as "everything up to here", so that is harmless.
        """
        return Position(self.ledger_id, self.entry_id - 1)


# Sorts before every real position; used where "nothing yet" must still compare.
BEFORE_EVERYTHING = Position(-1, -1)
