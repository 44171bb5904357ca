"""A consumer attached to a subscription, and the sink through which messages reach its socket.

The domain (subscription, dispatcher) never touches sockets or protocol frames: it talks to a
``ConsumerSink``, which ``broker.connection.core.ServerConnection`` implements. Tests use a
list-backed fake sink.

Permits count **messages**, not entries. As in the Java broker an entry is sent while
permits > 0, so the count may go negative. What a batch entry *costs* must equal what the client
gives back for it, or the balance drifts (PIP-54 B4):

* a whole batch of N messages costs N;
* a partially acknowledged batch is sent with an ``ack_set`` and the client skips the
  acknowledged indexes. The official client (C++ core, 4.2.0 verified on the wire by
  ``tests/integration/test_batch_index_ack.py``) still gives back a permit for every skipped
  index, so the entry costs N (``returns_permits_for_skipped``, the default). The Java client
  since Pulsar #22091 gives back only the delivered indexes; for such a client the entry costs
  its still-unacknowledged indexes.

``unacked_messages`` counts messages dispatched and not yet acknowledged (a partially
acknowledged batch counts its remaining indexes), as Java's ``unackedMessages`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from broker.dispatch.key_shared import KeySharedPolicy
from broker.storage import Position

#: The hash recorded for an entry dispatched outside Key_Shared (no sticky key hash).
NO_HASH = -1

#: One delivery of a run: ``(position, entry, redelivery_count, ack_set or None)``, the shape
#: ``protocol.dispatch_frames.encode_messages`` takes as it is.
RunItem = tuple[Position, bytes, int, list[int] | None]


class PendingEntries:
    """The entries dispatched to one consumer and not yet fully acknowledged, each with the
    sticky key hash it was dispatched under (Key_Shared; ``NO_HASH`` otherwise), as Java's
    ``PendingAcksMap``: Key_Shared's draining hashes count what a consumer still holds of a
    hash, and learn through ``on_release`` when it holds one less."""

    __slots__ = ("_hashes", "on_release")

    def __init__(self) -> None:
        self._hashes: dict[Position, int] = {}
        #: Called with the hash of an entry leaving (acknowledged, given back), if set.
        self.on_release: Callable[[int], None] | None = None

    def add(self, position: Position, key_hash: int = NO_HASH) -> None:
        """Record ``position``; a hash recorded first (by the consumer selection) is kept."""
        if key_hash != NO_HASH or position not in self._hashes:
            self._hashes[position] = key_hash

    def discard(self, position: Position) -> None:
        key_hash = self._hashes.pop(position, None)
        if key_hash is not None and key_hash != NO_HASH and self.on_release is not None:
            self.on_release(key_hash)

    def hashes(self) -> Iterator[tuple[Position, int]]:
        """``(position, sticky key hash)`` of every pending entry."""
        return iter(list(self._hashes.items()))

    def __iter__(self) -> Iterator[Position]:
        # A copy: callers release entries while they walk them (a consumer's give-back).
        return iter(list(self._hashes))

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, position: object) -> bool:
        return position in self._hashes


class ConsumerSink(Protocol):
    """What the dispatcher needs from a client connection."""

    def send_messages(self, consumer_id: int, run: list[RunItem]) -> None:
        """Queue the MESSAGE frames of ``run`` for the consumer, in order, as one write (sent
        with the next socket flush)."""

    def is_writable(self) -> bool:
        """False while the socket's write buffer is above its high-water mark."""

    def close_consumer(self, consumer_id: int) -> None:
        """Broker-initiated CLOSE_CONSUMER: forget the consumer id, then tell the client."""

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        """ACTIVE_CONSUMER_CHANGE for Failover subscriptions."""


@dataclass(eq=False, slots=True)
class Consumer:
    """One SUBSCRIBE on one connection. Identity is the object, not the (reusable) id."""

    consumer_id: int
    name: str
    sink: ConsumerSink
    priority_level: int = 0
    permits: int = 0
    #: messages dispatched to this consumer and not yet acknowledged
    unacked_messages: int = 0
    #: Whether the client gives back a permit for each batch index it skips because the
    #: ``ack_set`` marks it acknowledged (C++ core: yes; Java client since #22091: no).
    returns_permits_for_skipped: bool = True
    #: Key_Shared: the consumer's ``keySharedMeta`` (None for the other subscription types).
    key_shared: KeySharedPolicy | None = None
    #: Key_Shared hash ranges owned by this consumer, inclusive bounds.
    hash_ranges: list[tuple[int, int]] = field(default_factory=list)
    #: entries dispatched to this consumer and not yet fully acknowledged
    pending: PendingEntries = field(default_factory=PendingEntries)
    messages_out: int = 0
    connected_since: float = 0.0

    def owns_hash(self, key_hash: int) -> bool:
        return any(lo <= key_hash <= hi for lo, hi in self.hash_ranges)

    def can_receive(self) -> bool:
        return self.permits > 0 and self.sink.is_writable()
