"""Where an unowned bundle goes: the live broker owning the fewest bundles.

A simple load measure (Pulsar's load managers weigh CPU, memory and rates): bundles are
similar in load when topics hash evenly. Ties break by rendezvous hashing of (bundle, broker),
so every broker computes the same choice from the same etcd view and a lookup arriving at any
broker redirects to the same candidate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import mmh3

from broker.cluster.bundles import Bundle
from broker.cluster.membership import BrokerInfo


def choose_broker(
    bundle: Bundle, brokers: Iterable[BrokerInfo], owners: Iterable[str]
) -> BrokerInfo | None:
    """The candidate for ``bundle`` among ``brokers``; ``owners`` lists the broker id of every
    owned bundle (one entry per bundle). None when no broker is alive."""
    load = Counter(owners)

    def rank(broker: BrokerInfo) -> tuple[int, int]:
        return load[broker.broker_id], mmh3.hash(f"{bundle.name}@{broker.broker_id}", 0, False)

    return min(brokers, key=rank, default=None)
