"""The idempotency window's per-SEND step, as one call (issue #26, item 6).

A single message carrying a key is the SEND path's keyed case. Deciding it took two calls and
a Python frame: the key scan (``protocol.idempotency_scan.quick_key``, which made a digest
object) and ``IdempotencyWindow.reserve_one`` (the clock, the stamp guard, the table). Here
`PyKeyGate.reserve_entry` is that whole step: scan, digest, clock, and the table's ``reserve``
(expire, evict, look up, add in flight).

``PyKeyGate`` is the pure-Python reference and the base of
``broker.publish.idempotency_window.IdempotencyWindow``; ``KeyGate`` is the compiled one
(``protocol/_idem_window.pxi``: the scan walks the bytes and the digest goes from a stack
buffer straight into the table) when the extension is in use, with the same answers
(tests/broker/publish/test_idempotency_gate.py compares both).

The gate also settles: `PyKeyGate.persist_group` makes a durable group's keys durable in one
call per group commit (the compiled one reads each position as the tuple it is).

The gate holds the state the step reads and writes: the key table (the shared empty one until
the first key, ``_shared``), the clock, the last stamp (stamps never go backwards: a wall-clock
step back would reorder the window) and the window's two limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from broker.publish.idempotency_table import KeyTable, PyKeyTable
from protocol._accel import speedups
from protocol.idempotency_scan import py_quick_key

__all__ = ["KeyGate", "PyKeyGate"]

#: The table of every window that never held a key; read, never written (`_writable_table`).
_NO_KEYS = KeyTable()


class PyKeyGate:
    """The keyed SEND's step (module docstring); the window sets the fields in its __init__."""

    __slots__ = ("_clock", "_last_stamp", "_max_keys", "_seconds", "_shared", "_table")

    _clock: Callable[[], float]
    _last_stamp: float
    _max_keys: int
    _seconds: float
    _shared: bool
    _table: PyKeyTable

    def _init_gate(self, clock: Callable[[], float], seconds: float, max_keys: int) -> None:
        self._clock = clock
        self._last_stamp = 0.0
        self._seconds = seconds
        self._max_keys = max_keys
        # The shared empty table until the first key: a table costs ~1 KiB empty, and most
        # loaded topics never see a key (issue #26).
        self._table = _NO_KEYS
        self._shared = True

    def _writable_table(self) -> PyKeyTable:
        """The window's own table, made on first use (it replaces the shared empty one, which
        is only ever read: finding nothing, expiring and evicting nothing)."""
        if self._shared:
            self._table = KeyTable()
            self._shared = False
        return self._table

    def reserve_key(self, digest: bytes) -> int:
        """Expire, evict, then look ``digest`` up at the clock's instant: the new slot (``>=
        0``, in flight from now on), or ``-1 - seq`` of the live slot already holding it."""
        now = self._clock()
        if now < self._last_stamp:
            now = self._last_stamp
        self._last_stamp = now
        table = self._writable_table() if self._shared else self._table
        slot: int = table.reserve(digest, now, self._seconds, self._max_keys)
        return slot

    def reserve_entry(
        self, entry: bytes, max_header_bytes: int, max_properties: int
    ) -> int | bool | None:
        """`quick_key` of ``entry``, then `reserve_key` of a single message's key: False (no
        key to read), None (a batch or anything else: the full check decides), or
        `reserve_key`'s answer."""
        quick = py_quick_key(entry, max_header_bytes, max_properties)
        if isinstance(quick, bytes):
            return self.reserve_key(quick)
        return quick

    def persist_group(self, group: Sequence[Any]) -> None:
        """The keys of a durable group (publications with a ``ticket`` and their ``position``,
        in append order) become durable: a single key's slot here, as
        `IdempotencyWindow.on_keys_persisted` does for an int ticket (persist, then evict down
        to ``max_keys``); any other ticket through ``on_keys_persisted`` itself."""
        table = self._table
        max_keys = self._max_keys
        for write in group:
            ticket = write.ticket
            if ticket is None:
                continue
            position = write.position
            if type(ticket) is int:
                table.persist(ticket, position[0], position[1], 0)
                if table.durable > max_keys:
                    table.evict_over(max_keys)
            else:
                self.on_keys_persisted(ticket, position)

    def on_keys_persisted(self, ticket: Any, position: Any) -> None:
        """The window's (`IdempotencyWindow.on_keys_persisted`): a batch's ticket."""
        raise NotImplementedError


def _choose() -> type[PyKeyGate]:
    compiled = speedups()
    gate: type[PyKeyGate] | None = getattr(compiled, "KeyGate", None)
    # The compiled gate makes compiled tables only: with the reference table (the extension
    # off), the reference gate.
    return gate if gate is not None and KeyTable is not PyKeyTable else PyKeyGate


if TYPE_CHECKING:
    KeyGate = PyKeyGate
else:
    KeyGate = _choose()
