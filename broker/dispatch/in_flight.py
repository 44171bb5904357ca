"""What a subscription has handed out, and what it has to hand out again.

* *In flight*: entries dispatched to a consumer and not yet fully acknowledged, with what each
  still counts in that consumer's ``unacked_messages`` (the sum of the still-unacknowledged
  indexes of its in-flight entries).
* The *replay* queue: entries to deliver again (negative acks, a consumer gone, an
  Exclusive/Failover rewind), served in position order before any new entry.
* Redelivery counts, sent with each MESSAGE.

None of it is durable: after a restart or a topic reload it is rebuilt from the cursor, so
acknowledged messages are never redelivered and unacknowledged ones always are.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from broker.dispatch.consumer import Consumer
from broker.storage import Position


@dataclass(slots=True)
class InFlight:
    """An entry dispatched to a consumer and not yet fully acknowledged."""

    consumer: Consumer
    #: messages in the entry (``num_messages``; 1 for a non-batch entry)
    batch_size: int
    #: of those, how many are still unacknowledged (this entry's share of the consumer's
    #: ``unacked_messages``)
    unacked: int

    def release(self, position: Position) -> None:
        """Take the entry off its consumer: no longer pending there, no longer unacked."""
        consumer = self.consumer
        consumer.pending.discard(position)
        consumer.unacked_messages = max(0, consumer.unacked_messages - self.unacked)


class InFlightEntries:
    """The in-flight entries, replay queue and redelivery counts of one subscription.

    The dispatch loop reads the containers directly (``broker.dispatch.dispatcher``), so they
    are created once and only ever cleared, never replaced.
    """

    def __init__(self) -> None:
        self.entries: dict[Position, InFlight] = {}
        self.replay: list[Position] = []  # heap
        self.replay_set: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}

    def give_back(
        self, consumer: Consumer, positions: list[Position] | None, *, count: bool
    ) -> None:
        """Queue ``consumer``'s in-flight entries (those of ``positions``, or all) for replay;
        ``count``: as a redelivery (negative ack, consumer gone), not a rewind."""
        chosen = list(consumer.pending) if positions is None else positions
        for position in chosen:
            flight = self.entries.get(position)
            if flight is None or flight.consumer is not consumer:
                continue
            del self.entries[position]
            flight.release(position)
            if count:
                self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1
            self.add_replay(position)

    def add_replay(self, position: Position) -> None:
        if position not in self.replay_set:
            self.replay_set.add(position)
            heapq.heappush(self.replay, position)

    def clear_replay(self) -> None:
        self.replay.clear()
        self.replay_set.clear()

    def clear(self) -> None:
        """Forget everything: the subscription restarts at another position (seek)."""
        self.entries.clear()
        self.clear_replay()
        self.redelivery_counts.clear()

    def unacked_count(self) -> int:
        """Messages dispatched and not yet acknowledged, over all consumers."""
        return sum(flight.unacked for flight in self.entries.values())
