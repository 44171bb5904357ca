"""Which of a subscription's consumers gets an entry, by subscription type.

* Exclusive: the one consumer. Failover: the *active* consumer, the lowest priority level and,
  among equals, the longest connected; the others get nothing until it goes. A pass decides
  once whether the active consumer can receive (``begin_pass``) and sends it at most
  ``min(permits, dispatcherMaxReadBatchSize)`` entries: with ``precise`` flow control each only
  while its permits last; without, all of them whatever their batch sizes, as Java's
  single-active-consumer dispatcher does with ``preciseDispatcherFlowControl`` off (permits
  count messages, so a run of batches takes them below zero).
* Shared: round-robin over the consumers that can receive (permits, a writable socket).
* Key_Shared: the consumer owning the hash range of the entry's sticky key, AUTO_SPLIT or STICKY
  as the first consumer's ``keySharedMeta`` says (``broker.dispatch.key_shared``); while it
  cannot receive, or the hash still drains from its previous owner, the entry waits for it.
"""

from __future__ import annotations

import functools
import time

from broker.dispatch.consumer import Consumer
from broker.dispatch.key_shared import (
    AutoSplitRanges,
    DrainingHashes,
    KeySharedPolicy,
    StickyRanges,
    sticky_key_hash,
)
from broker.errors import ConsumerBusy
from broker.storage import Position
from protocol.enums import KeySharedMode, SubType
from protocol.metadata import EntryMetadata

_DEFAULT_POLICY = KeySharedPolicy()


class ConsumerSelection:
    """The consumers of one subscription and its type (set by the first to attach)."""

    def __init__(self) -> None:
        self.consumers: list[Consumer] = []
        self.sub_type: SubType | None = None
        #: The Key_Shared policy of the subscription: its first consumer's, as in Java (a
        #: consumer with another mode or out-of-order flag is refused while any is attached).
        self.key_shared: KeySharedPolicy = _DEFAULT_POLICY
        self._auto_split: AutoSplitRanges[Consumer] = AutoSplitRanges()
        self._sticky: StickyRanges[Consumer] = StickyRanges()
        self.draining: DrainingHashes[Consumer] = DrainingHashes()
        # Exclusive/Failover: the active consumer of the pass running, and how many entries the
        # pass may still send it (``begin_pass``); None outside a pass.
        self._pass_consumer: Consumer | None = None
        self._pass_entries = 0
        self._pass_precise = True

    def add(self, consumer: Consumer, sub_type: SubType) -> None:
        """Attach a consumer; raises ConsumerBusy (another type or Key_Shared policy) or
        ConsumerAssignError (STICKY ranges taken) per the Java rules."""
        if self.consumers and self.sub_type is not None and sub_type != self.sub_type:
            raise ConsumerBusy("Subscription is of different type")
        if sub_type == SubType.Exclusive and self.consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        if sub_type == SubType.Key_Shared:
            self._add_key_shared(consumer)
        self.sub_type = sub_type
        consumer.connected_since = time.monotonic()
        self.consumers.append(consumer)

    def _add_key_shared(self, consumer: Consumer) -> None:
        policy = consumer.key_shared or _DEFAULT_POLICY
        if self.consumers and self.sub_type == SubType.Key_Shared:
            conflict = policy.conflict_with(self.key_shared)
            if conflict is not None:
                raise ConsumerBusy(conflict)
        else:
            self._reset_key_shared(policy)
        if policy.mode == KeySharedMode.STICKY:
            self._sticky.add(consumer, policy.hash_ranges, consumer.name)
        else:
            moved = self._auto_split.add(consumer)
            if moved is not None and policy.drains_hashes:
                # What the previous owner still holds of the hashes it lost drains first.
                for _position, key_hash in moved.previous.pending.hashes():
                    if moved.start <= key_hash <= moved.end:
                        self.draining.add(moved.previous, key_hash)
        if policy.drains_hashes:
            consumer.pending.on_release = functools.partial(self.draining.release, consumer)
        self._refresh_hash_ranges(consumer)

    def _reset_key_shared(self, policy: KeySharedPolicy) -> None:
        self.key_shared = policy
        self._auto_split = AutoSplitRanges()
        self._sticky = StickyRanges()
        self.draining.clear()

    def remove(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        if self.sub_type == SubType.Key_Shared:
            self._auto_split.remove(consumer)
            self._sticky.remove(consumer)
            # Its entries go back for replay (in position order): nothing of it drains.
            self.draining.consumer_removed(consumer)
            self.draining.prune(self.owner_of)
            consumer.pending.on_release = None
            self._refresh_hash_ranges()

    def clear(self) -> None:
        for consumer in self.consumers:
            consumer.pending.on_release = None
        self.consumers.clear()
        self._reset_key_shared(_DEFAULT_POLICY)

    def _refresh_hash_ranges(self, joining: Consumer | None = None) -> None:
        ranges = self._sticky if self.key_shared.mode == KeySharedMode.STICKY else self._auto_split
        for c in (*self.consumers, *([joining] if joining is not None else [])):
            c.hash_ranges = ranges.ranges_of(c)

    def owner_of(self, key_hash: int) -> Consumer | None:
        """The Key_Shared consumer owning ``key_hash`` (None: nobody, STICKY holes)."""
        if self.key_shared.mode == KeySharedMode.STICKY:
            return self._sticky.owner_of(key_hash)
        return self._auto_split.owner_of(key_hash)

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

    def begin_pass(self, max_entries: int, *, precise: bool = True) -> None:
        """A dispatch pass starts: an Exclusive/Failover subscription whose active consumer can
        receive may send it up to ``min(permits, max_entries)`` entries in this pass (Java's
        ``readMoreEntries``); ``precise``: only while its permits last. The other types decide
        per entry."""
        if self.sub_type not in (SubType.Exclusive, SubType.Failover):
            return
        active = self.active()
        if active is None or not active.can_receive():
            self._pass_consumer, self._pass_entries = None, 0
            return
        self._pass_consumer, self._pass_entries = active, min(active.permits, max_entries)
        self._pass_precise = precise

    def end_pass(self) -> None:
        self._pass_consumer, self._pass_entries = None, 0

    def sink_written(self) -> None:
        """The pass handed a run to the sinks before its end: the active consumer's socket may
        be above its high-water mark now, and then the pass sends it nothing more."""
        consumer = self._pass_consumer
        if consumer is not None and not consumer.sink.is_writable():
            self._pass_entries = 0

    def any_ready(self) -> bool:
        """Whether this pass can send an entry to some consumer now."""
        consumer = self._pass_consumer
        if consumer is not None:
            return self._pass_entries > 0 and (consumer.permits > 0 or not self._pass_precise)
        return self.ready_for_pass()

    def ready_for_pass(self) -> bool:
        """Whether a pass starting now would send anything (the next one is worth
        scheduling)."""
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self.active()
            return active is not None and active.can_receive()
        return any(c.can_receive() for c in self.consumers)

    def choose(self, metadata: EntryMetadata, position: Position) -> Consumer | None:
        """The consumer to send the entry at ``position`` to now, or None: it waits.

        A consumer returned gets the entry (the dispatcher sends it at once), so Key_Shared
        records the entry's hash in its pending entries here.
        """
        consumer = self._pass_consumer
        if consumer is not None:
            if self._pass_entries <= 0 or (consumer.permits <= 0 and self._pass_precise):
                return None
            self._pass_entries -= 1
            return consumer
        if self.sub_type in (SubType.Exclusive, SubType.Failover) or self.sub_type is None:
            active = self.active()
            return active if active is not None and active.can_receive() else None
        if self.sub_type == SubType.Key_Shared:
            key = metadata.ordering_key or (
                metadata.partition_key.encode() if metadata.partition_key else None
            )
            key_hash = sticky_key_hash(key)
            owner = self.owner_of(key_hash)
            if owner is None or not owner.can_receive():
                return None
            if self.draining and self.draining.blocks(owner, key_hash):
                return None
            owner.pending.add(position, key_hash)
            return owner
        return self._next_shared()

    def _next_shared(self) -> Consumer | None:
        # Round-robin: rotate the list so the chosen consumer goes to the back.
        for index, consumer in enumerate(self.consumers):
            if consumer.can_receive():
                self.consumers.append(self.consumers.pop(index))
                return consumer
        return None
