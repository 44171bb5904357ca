"""Which of a subscription's consumers gets an entry, by subscription type.

* Exclusive: the one consumer. Failover: the *active* consumer, the lowest priority level and,
  among equals, the longest connected; the others get nothing until it goes.
* Shared: round-robin over the consumers that can receive (permits, a writable socket).
* Key_Shared: the consumer owning the AUTO_SPLIT hash range of the entry's sticky key
  (``broker.dispatch.key_shared``); while it cannot receive, the entry waits for it.
"""

from __future__ import annotations

import time

from broker.dispatch.consumer import Consumer
from broker.dispatch.key_shared import AutoSplitRanges, sticky_key_hash
from broker.errors import ConsumerBusy
from protocol.enums import SubType
from protocol.metadata import EntryMetadata


class ConsumerSelection:
    """The consumers of one subscription and its type (set by the first to attach)."""

    def __init__(self) -> None:
        self.consumers: list[Consumer] = []
        self.sub_type: SubType | None = None
        self._key_ranges: AutoSplitRanges[int] = AutoSplitRanges()

    def add(self, consumer: Consumer, sub_type: SubType) -> None:
        """Attach a consumer; raises ConsumerBusy per the Java rules."""
        if self.consumers and self.sub_type is not None and sub_type != self.sub_type:
            raise ConsumerBusy("Subscription is of different type")
        if sub_type == SubType.Exclusive and self.consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        self.sub_type = sub_type
        consumer.connected_since = time.monotonic()
        self.consumers.append(consumer)
        if sub_type == SubType.Key_Shared:
            self._key_ranges.add(id(consumer))
            self._refresh_hash_ranges()

    def remove(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        if self.sub_type == SubType.Key_Shared:
            self._key_ranges.remove(id(consumer))
            self._refresh_hash_ranges()

    def clear(self) -> None:
        self.consumers.clear()
        self._key_ranges = AutoSplitRanges()

    def _refresh_hash_ranges(self) -> None:
        for c in self.consumers:
            c.hash_ranges = self._key_ranges.ranges_of(id(c))

    def active(self) -> Consumer | None:
        """The consumer that receives everything in Exclusive/Failover mode."""
        if not self.consumers:
            return None
        if self.sub_type == SubType.Failover:
            return min(self.consumers, key=lambda c: (c.priority_level, c.connected_since))
        return self.consumers[0]

    def read_budget(self) -> int:
        """How many entries are worth reading from disk now: no more than the consumers that
        would get them have permits for (Java: ``min(permits, dispatcherMaxReadBatchSize)``)."""
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active()
            return active.permits if active is not None else 0
        return sum(c.permits for c in self.consumers if c.permits > 0)

    def any_ready(self) -> bool:
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active()
            return active is not None and active.can_receive()
        return any(c.can_receive() for c in self.consumers)

    def choose(self, metadata: EntryMetadata) -> Consumer | None:
        """The consumer to send an entry to now, or None: it waits."""
        if self.sub_type in (SubType.Exclusive, SubType.Failover) or self.sub_type is None:
            active = self.active()
            return active if active is not None and active.can_receive() else None
        if self.sub_type == SubType.Key_Shared:
            key = metadata.ordering_key or (
                metadata.partition_key.encode() if metadata.partition_key else None
            )
            owner_id = self._key_ranges.owner_of(sticky_key_hash(key))
            for c in self.consumers:
                if id(c) == owner_id:
                    return c if c.can_receive() else None
            return None
        return self._next_shared()

    def _next_shared(self) -> Consumer | None:
        # Round-robin: rotate the list so the chosen consumer goes to the back.
        for index, consumer in enumerate(self.consumers):
            if consumer.can_receive():
                self.consumers.append(self.consumers.pop(index))
                return consumer
        return None
