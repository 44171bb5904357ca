"""Positions in a topic partition: ``(ledger, entry, batch index)`` of the next message to read.

Pure code (no I/O, no pyspark) so it is tested without a JVM.

A ``Position`` is a cut in the partition's total message order, Kafka style: "the next message
to read". It always names an entry the connector saw (or the earliest sentinel), so a reader can
start at that entry and the data-loss check can tell whether it still exists:

* ``(l, e, b)`` with ``b`` below the entry's message count: the message at batch index ``b`` of
  entry ``(l, e)`` (``b = 0`` for a message that is not in a batch);
* ``(l, e, n)`` with ``n`` the entry's message count: just after that entry (what
  ``ReadAllAvailable`` gives: after the topic's last message, whose successor does not exist yet
  and whose entry id may be in a ledger the broker has not opened);
* ``EARLIEST`` ``(-1, -1, 0)``: before every message of the partition.

Order is the tuple order, which is the topic's message order (``(l, e, n) < (l, e + 1, 0)``).

The ``offset`` column is a position packed in a long: ``(ledger << 40) | (entry << 16) | index``
(ledger < 2^23, entry < 2^24, index < 2^16). It grows with the message order inside a partition
and ``unpack`` gives the position back, so ``startingOffsets`` accepts it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "EARLIEST",
    "LEDGER_BITS",
    "Position",
    "PositionOutOfRange",
    "pack",
    "unpack",
]

LEDGER_BITS = 23
ENTRY_BITS = 24
INDEX_BITS = 16


class PositionOutOfRange(ValueError):
    """A message id that does not fit the packed ``offset`` long."""


class Position(NamedTuple):
    """The next message to read: entry ``(ledger, entry)``, batch index ``batch``."""

    ledger: int
    entry: int
    batch: int

    @classmethod
    def of_message(cls, ledger: int, entry: int, batch_index: int) -> Position:
        """Where a message is (a message outside a batch has batch index -1: index 0)."""
        return cls(ledger, entry, max(batch_index, 0))

    @classmethod
    def after_message(cls, ledger: int, entry: int, batch_index: int) -> Position:
        """Just after a message: the next index of its entry (past the end for the last one)."""
        return cls(ledger, entry, max(batch_index, 0) + 1)

    @property
    def is_earliest(self) -> bool:
        return self.ledger < 0

    def to_json(self) -> dict[str, int]:
        """Canonical JSON form (keys sorted, Spark compares offsets as strings)."""
        return {"b": self.batch, "e": self.entry, "l": self.ledger}

    @classmethod
    def from_json(cls, value: Any) -> Position:
        """A position from ``to_json``'s form, or a packed ``offset`` long.

        Raises:
            ValueError: neither form.
        """
        if isinstance(value, bool):
            raise ValueError(f"not a position: {value!r}")
        if isinstance(value, int):
            return unpack(value)
        if isinstance(value, dict) and set(value) == {"l", "e", "b"}:
            ledger, entry, index = (value[k] for k in ("l", "e", "b"))
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (ledger, entry, index)):
                if ledger < 0:
                    return EARLIEST
                if entry >= 0 and index >= 0:
                    return cls(ledger, entry, index)
        raise ValueError(f'not a position (want {{"l": ledger, "e": entry, "b": index}}): {value}')

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch}"


EARLIEST = Position(-1, -1, 0)


def pack(ledger: int, entry: int, batch_index: int) -> int:
    """The ``offset`` column of the message at ``(ledger, entry, batch_index)``.

    Raises:
        PositionOutOfRange: a field does not fit its bits.
    """
    index = max(batch_index, 0)
    if not (
        0 <= ledger < 1 << LEDGER_BITS and 0 <= entry < 1 << ENTRY_BITS and index < 1 << INDEX_BITS
    ):
        raise PositionOutOfRange(
            f"message id {ledger}:{entry}:{batch_index} does not fit the offset column "
            f"(ledger < 2^{LEDGER_BITS}, entry < 2^{ENTRY_BITS}, batch index < 2^{INDEX_BITS})"
        )
    return (ledger << (ENTRY_BITS + INDEX_BITS)) | (entry << INDEX_BITS) | index


def unpack(offset: int) -> Position:
    """The position of the message whose ``offset`` column is ``offset``.

    Raises:
        PositionOutOfRange: a negative value (the -1/-2 markers are resolved by callers).
    """
    if offset < 0 or offset >= 1 << (LEDGER_BITS + ENTRY_BITS + INDEX_BITS):
        raise PositionOutOfRange(f"{offset} is not an offset of this connector")
    return Position(
        offset >> (ENTRY_BITS + INDEX_BITS),
        (offset >> INDEX_BITS) & ((1 << ENTRY_BITS) - 1),
        offset & ((1 << INDEX_BITS) - 1),
    )
