"""When a bundle is too hot and where to cut it (Pulsar's ``BundleSplitStrategy``).

The owner of a bundle checks it at each balancing round: a bundle holding at least two topics
is split when it has more than ``loadBalancerNamespaceBundleMaxTopics`` topics, or more than
``loadBalancerNamespaceBundleMaxMsgRate`` messages per second (in + out), or more than
``loadBalancerNamespaceBundleMaxBandwidthMbytes`` MiB per second (in + out), as long as its
namespace has fewer than ``loadBalancerNamespaceMaximumBundles`` bundles. A single topic is
never worth splitting: both halves but one would be empty.

The cut follows ``defaultNamespaceBundleSplitAlgorithm``:

* ``range_equally_divide`` (Pulsar's default): the middle of the hash range. When all the
  topics hash into one half, Pulsar splits the hot half again at a later round, closing and
  reopening its topics each time; Magnetar goes on halving that half at once, until a cut
  separates the topics, and writes all the cuts together. The ranges are those Pulsar reaches
  after as many rounds (halves of halves), the empty ones included.
* ``topic_count_equally_divide``: at the middle topic hash, so each half holds half of the
  topics at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.cluster.bundles import Bundle, topic_hash
from broker.cluster.load import BundleLoad, TopicLoads

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE)
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SplitLimits:
    """Pulsar's thresholds (``loadBalancerNamespaceBundleMax*``; <= 0 disables one)."""

    max_topics: int = 1000
    max_msg_rate: float = 30_000.0
    max_bandwidth_mbytes: float = 100.0
    max_bundles: int = 128
    algorithm: str = RANGE_EQUALLY_DIVIDE

    def too_hot(self, load: BundleLoad) -> bool:
        if load.topics < 2:
            return False
        return (
            (self.max_topics > 0 and load.topics > self.max_topics)
            or (self.max_msg_rate > 0 and load.msg_rate > self.max_msg_rate)
            or (self.max_bandwidth_mbytes > 0 and load.throughput > self.max_bandwidth_mbytes * MIB)
        )


def split_points(bundle: Bundle, codes: list[int], algorithm: str) -> list[int]:
    """Where to cut ``bundle`` whose topics hash to ``codes`` (see the module docstring);
    empty if it cannot be cut."""
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        ordered = sorted(codes)
        if len(ordered) < 2:
            return []
        middle = len(ordered) // 2
        point = ordered[middle]  # the upper half starts with the middle topic
        if ordered[middle - 1] == point or not bundle.lower < point < bundle.upper:
            return []  # two topics with one hash cannot be told apart by any range
        return [point]
    return _halvings(bundle.lower, bundle.upper, codes)


def _halvings(lower: int, upper: int, codes: list[int]) -> list[int]:
    """The middles of [lower, upper), then of the half holding every code, and so on, until
    one separates the codes; a single cut when there are no two codes to separate."""
    points: list[int] = []
    while True:
        middle = (lower + upper) // 2
        if not lower < middle < upper:
            return []  # the codes are equal: no range tells them apart
        points.append(middle)
        below = sum(1 for code in codes if code < middle)
        if len(codes) < 2 or 0 < below < len(codes):
            return points
        lower, upper = (lower, middle) if below else (middle, upper)


def bundles_to_split(
    topics: TopicLoads, limits: SplitLimits, bundle_count: Callable[[str], int]
) -> list[tuple[Bundle, list[int]]]:
    """The hot bundles among ``topics`` (this broker's, each with its topics' loads) and their
    cut points, hottest first, within each namespace's maximum number of bundles."""
    totals: dict[Bundle, BundleLoad] = {}
    for bundle, entries in topics.items():
        total = BundleLoad()
        for _, load in entries:
            total = total.plus(load)
        totals[bundle] = total
    planned: dict[str, int] = {}
    chosen = []
    for bundle in sorted(totals, key=lambda b: totals[b].msg_rate, reverse=True):
        if not limits.too_hot(totals[bundle]):
            continue
        count = bundle_count(bundle.namespace) + planned.get(bundle.namespace, 0)
        codes = [topic_hash(name) for name, _ in topics[bundle]]
        points = split_points(bundle, codes, limits.algorithm)
        if points and count + len(points) <= limits.max_bundles:
            planned[bundle.namespace] = planned.get(bundle.namespace, 0) + len(points)
            chosen.append((bundle, points))
    return chosen
