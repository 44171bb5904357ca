"""Where an unowned bundle goes: the live broker with the least traffic, then fewest bundles.

Pulsar's ``LeastLongTermMessageRate``: each broker's load is the message rate (in + out) of the
bundles it owns, as its last load report says (``load.py``), plus the rates of the bundles
placed on it and not yet owned (preallocated); the least loaded broker gets the bundle. Idle
brokers (all at rate 0, e.g. a fresh cluster) fall back to bundle counts, the rule of earlier
builds, and remaining ties break by rendezvous hashing of (bundle, broker), so every broker
computes the same choice from the same etcd view and a lookup arriving at any broker redirects
to the same candidate.

A bundle this broker has just placed counts towards its candidate's load until the candidate
owns it or a few seconds pass (Pulsar's "preallocated bundles"): a client looking up the
partitions of one topic at once would otherwise see the same empty view for each of them and
could be sent to one broker for all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import mmh3

from broker.cluster.bundles import Bundle
from broker.cluster.membership import BrokerInfo

PREALLOCATION_SECONDS = 10.0  # long enough for a redirected client to reach its candidate


def choose_broker(
    bundle: Bundle,
    brokers: Iterable[BrokerInfo],
    owners: Iterable[str],
    rates: Mapping[str, float] | None = None,
) -> BrokerInfo | None:
    """The candidate for ``bundle`` among ``brokers``; ``owners`` lists the broker id of every
    owned (or preallocated) bundle, one entry per bundle; ``rates`` each broker's message rate
    (absent: 0). None when no broker is alive."""
    load = Counter(owners)
    rate = rates or {}

    def rank(broker: BrokerInfo) -> tuple[float, int, int]:
        return (
            round(rate.get(broker.broker_id, 0.0), 1),  # sub-0.1 msg/s noise is a tie
            load[broker.broker_id],
            mmh3.hash(f"{bundle.name}@{broker.broker_id}", 0, False),
        )

    return min(brokers, key=rank, default=None)


@dataclass
class Preallocations:
    """Bundles placed by this broker and not yet owned: bundle -> (broker id, expiry, rate)."""

    ttl: float = PREALLOCATION_SECONDS
    _placed: dict[Bundle, tuple[str, float, float]] = field(default_factory=dict)

    def forget_settled(self, owned: Iterable[Bundle], now: float) -> None:
        """Drop what has expired or is owned now (the owner key counts it from then on)."""
        settled = set(owned)
        for bundle, (_, expires, _) in list(self._placed.items()):
            if bundle in settled or expires <= now:
                del self._placed[bundle]

    def candidate(self, bundle: Bundle) -> str | None:
        placed = self._placed.get(bundle)
        return None if placed is None else placed[0]

    def loads(self) -> list[str]:
        """One broker id per preallocated bundle."""
        return [broker_id for broker_id, _, _ in self._placed.values()]

    def rates(self) -> dict[str, float]:
        """The expected message rate of the bundles preallocated to each broker."""
        total: dict[str, float] = {}
        for broker_id, _, rate in self._placed.values():
            total[broker_id] = total.get(broker_id, 0.0) + rate
        return total

    def place(self, bundle: Bundle, broker_id: str, now: float, rate: float = 0.0) -> None:
        self._placed[bundle] = (broker_id, now + self.ttl, rate)
