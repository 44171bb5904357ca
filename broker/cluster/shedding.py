"""Which bundle a broker gives away, and to whom (load shedding).

Pulsar's ``ThresholdShedder`` unloads bundles of a broker whose resource usage exceeds the
cluster's average by more than ``loadBalancerBrokerThresholdShedderPercentage`` (10 points);
its newer ``TransferShedder`` names the destination too, the least loaded broker. Magnetar
does both in one rule, with CPU as the resource (the one a broker runs out of):

* only a broker above ``average + threshold`` sheds, and only its own bundles (each broker
  decides for itself from the same reports, so no leader is needed);
* each bundle's part of its CPU is taken in proportion to its message rate; the broker moves
  the one bundle that best evens it with the least used broker, and only if the move lowers
  the larger of the two usages: a bundle as heavy as the gap or heavier would just move the hot
  spot, so it stays (the split of a hot bundle is what makes it movable).

When no broker is above the threshold, the usages cannot tell more: brokers that are all
saturated report the same usage, whatever number of busy topics each serves, and each topic
gets a smaller share on the broker with more. So a broker serving at least two topics more
than one that is not busier hands it the bundle that best evens the topic counts (Pulsar's
``loadBalancerDistributeBundlesEvenlyEnabled`` evens bundles in its placement for the same
reason; once hot bundles are split, bundles and topics are close to one another).

A bundle moved less than ``loadBalancerSheddingGracePeriodMinutes`` ago stays where it is
(Pulsar's grace period, ``staying``), so brokers never pass a bundle back and forth.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from broker.cluster.bundles import Bundle


@dataclass(frozen=True, slots=True)
class Share:
    """A broker's, or a bundle's, part of the work: CPU usage (percent of the broker's
    limit; bundles: 0), messages per second in + out, topics."""

    usage: float
    msg_rate: float
    topics: int


def choose_transfer(
    me: str,
    brokers: Mapping[str, Share],
    my_bundles: Mapping[Bundle, Share],
    threshold_percent: float,
    staying: Collection[Bundle] = (),
) -> tuple[Bundle, str] | None:
    """The bundle ``me`` should hand over and the broker to hand it to, or None.

    ``brokers``: every live broker's share (``me`` included); ``my_bundles``: the share of each
    bundle ``me`` owns; ``staying``: bundles within their grace period."""
    if me not in brokers or len(brokers) < 2:
        return None
    movable = {b: share for b, share in my_bundles.items() if b not in staying}
    average = sum(s.usage for s in brokers.values()) / len(brokers)
    if brokers[me].usage > average + threshold_percent:
        return _by_usage(me, brokers, movable)
    return _by_topics(me, brokers, movable, threshold_percent)


def _by_usage(
    me: str, brokers: Mapping[str, Share], movable: Mapping[Bundle, Share]
) -> tuple[Bundle, str] | None:
    mine = brokers[me]
    if mine.msg_rate <= 0:
        return None  # busy with something no bundle accounts for: moving one would not help
    others = {b: s for b, s in brokers.items() if b != me}
    target = min(others, key=lambda broker: (others[broker].usage, broker))
    gap = mine.usage - others[target].usage

    def usage_of(bundle: Bundle) -> float:
        return mine.usage * movable[bundle].msg_rate / mine.msg_rate

    fits = [b for b in movable if 0 < usage_of(b) < gap]
    if not fits:
        return None
    # The larger side after the move is max(mine - u, theirs + u): smallest when u is nearest
    # half the gap.
    return min(fits, key=lambda b: (abs(gap / 2 - usage_of(b)), b)), target


def _by_topics(
    me: str, brokers: Mapping[str, Share], movable: Mapping[Bundle, Share], threshold: float
) -> tuple[Bundle, str] | None:
    mine = brokers[me]
    # Not onto a busier broker: the topic rule must never undo the usage rule.
    others = {b: s for b, s in brokers.items() if b != me and s.usage <= mine.usage + threshold}
    if not others:
        return None
    target = min(others, key=lambda broker: (others[broker].topics, broker))
    gap = mine.topics - others[target].topics
    fits = [b for b, share in movable.items() if 0 < share.topics < gap]
    if not fits:
        return None
    best = min(fits, key=lambda b: (abs(gap / 2 - movable[b].topics), movable[b].msg_rate, b))
    return best, target
