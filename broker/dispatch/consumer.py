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

from dataclasses import dataclass, field
from typing import Protocol

from broker.storage import Position


class ConsumerSink(Protocol):
    """What the dispatcher needs from a client connection."""

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        entry: bytes,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        """Queue one MESSAGE frame for the consumer (written with the next socket flush)."""

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
    #: Key_Shared AUTO_SPLIT hash ranges owned by this consumer, inclusive bounds.
    hash_ranges: list[tuple[int, int]] = field(default_factory=list)
    #: entries dispatched to this consumer and not yet fully acknowledged
    pending: set[Position] = field(default_factory=set)
    messages_out: int = 0
    connected_since: float = 0.0

    def owns_hash(self, key_hash: int) -> bool:
        return any(lo <= key_hash <= hi for lo, hi in self.hash_ranges)

    def can_receive(self) -> bool:
        return self.permits > 0 and self.sink.is_writable()
