"""``maxOffsetsPerTrigger`` (alias ``maxEntriesPerTrigger``): a micro-batch's budget, counted in
entries from message ids and split fairly over the partitions. Pure code.

The unit is the **entry**: a message published alone is one entry, a batch of messages
published together is one entry (pulsar-spark's ``maxEntriesPerTrigger`` counts the same way).
An entry's message count is only in its payload's metadata, so counting messages would pull
every payload through the planner; entry ids are dense within a ledger, so the count of
entries between two positions is arithmetic on their ids (plus each ledger's entry count, from
the admin API's ``internalStats``, when a range spans ledgers). With producer batching off,
an entry is a message and the budget is Kafka's exactly.

Fairness follows the Kafka connector's rate limiter: each partition gets a share proportional
to its backlog, rounded down, but at least one entry when it has any, so no partition waits
for the others to drain (the total may exceed the budget by that rounding).

Ledgers are ``[(ledger id, entries)]`` oldest first; ``None`` when unknown (no ``admin.url``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

from spark_connector.positions import Position

__all__ = ["Ledgers", "cut", "entries_between", "estimate", "fair_shares"]

Ledgers = list[tuple[int, int]]
K = TypeVar("K", bound=Hashable)


def _end_entries(end: Position) -> int:
    """Entries of ``end``'s ledger before ``end`` (a position inside an entry counts it)."""
    return end.entry + (1 if end.batch > 0 else 0)


def entries_between(start: Position, end: Position, ledgers: Ledgers | None) -> int | None:
    """Entries holding messages in ``[start, end)``; None when it cannot be told from ids.

    ``start`` must be a real position (not ``EARLIEST``: resolve it to the first message).
    """
    if end <= start:
        return 0
    if start.ledger == end.ledger:
        return _end_entries(end) - start.entry
    if ledgers is None:
        return None
    total = 0
    for ledger, entries in ledgers:
        if ledger == start.ledger:
            total += max(entries - start.entry, 0)
        elif start.ledger < ledger < end.ledger:
            total += entries
    return total + _end_entries(end)


def estimate(start: Position, end: Position, ledgers: Ledgers | None) -> int:
    """``entries_between``, or a lower bound when a range spans ledgers of unknown size (the
    end ledger's entries plus one for the rest): only weighs the fair split."""
    known = entries_between(start, end, ledgers)
    if known is not None:
        return known
    return _end_entries(end) + 1


def fair_shares(limit: int, backlogs: Mapping[K, int]) -> dict[K, int]:
    """Entries each partition may take: proportional to its backlog, at least 1, at most all."""
    total = sum(backlogs.values())
    shares = {}
    for key, backlog in backlogs.items():
        if backlog <= 0:
            shares[key] = 0
            continue
        share = limit * backlog // total if total > limit else backlog
        shares[key] = min(max(share, 1), backlog)
    return shares


def cut(start: Position, share: int, end: Position, ledgers: Ledgers | None) -> Position | None:
    """The position ``share`` entries after ``start`` (never beyond ``end``); None when it
    falls past ``start``'s ledger and the ledgers' sizes are unknown (the planner then asks
    the broker where that entry is: ``Probe.first_from``)."""
    if share <= 0:
        return start
    if start.ledger == end.ledger:
        return min(Position(start.ledger, start.entry + share, 0), end)
    if ledgers is None:
        return None
    remaining = share
    for ledger, entries in ledgers:
        if ledger < start.ledger or entries <= 0:
            continue
        if ledger >= end.ledger:
            break
        first = start.entry if ledger == start.ledger else 0
        if first + remaining < entries:
            return Position(ledger, first + remaining, 0)
        remaining -= max(entries - first, 0)
    return min(Position(end.ledger, remaining, 0), end)
