"""When a bundle is hot and where it is cut (Pulsar's thresholds and split algorithms)."""

from __future__ import annotations

from broker.cluster.bundles import FULL_UPPER_BOUND, Bundle, bundles_of, topic_hash
from broker.cluster.load import BundleLoad
from broker.cluster.split import (
    RANGE_EQUALLY_DIVIDE,
    TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitLimits,
    bundles_to_split,
    split_points,
)
from protocol.topic_name import TopicName

WHOLE = Bundle("public/default", 0, FULL_UPPER_BOUND)


def test_pulsars_thresholds_make_a_bundle_of_two_topics_or_more_hot() -> None:
    limits = SplitLimits()
    assert not limits.too_hot(BundleLoad(20_000, 9_000, topics=5))
    assert limits.too_hot(BundleLoad(20_000, 10_001, topics=2))  # in + out > 30 000 msg/s
    assert limits.too_hot(BundleLoad(topics=1001))
    assert limits.too_hot(BundleLoad(throughput_in=60 * 2**20, throughput_out=41 * 2**20, topics=2))
    assert not limits.too_hot(BundleLoad(1e9, 1e9, 1e12, 1e12, topics=1))  # one topic: never


def test_range_equally_divide_cuts_in_the_middle_when_that_separates_the_topics() -> None:
    assert split_points(WHOLE, [0x10, 0x90000000], RANGE_EQUALLY_DIVIDE) == [0x7FFFFFFF]


def test_range_equally_divide_halves_again_until_the_topics_are_apart() -> None:
    # Both in the first quarter, on either side of its middle: cut at 1/2, then 1/4, then 1/8.
    points = split_points(WHOLE, [0x01000000, 0x30000000], RANGE_EQUALLY_DIVIDE)
    assert points == [0x7FFFFFFF, 0x3FFFFFFF, 0x1FFFFFFF]


def test_topic_count_equally_divide_puts_half_of_the_topics_on_each_side() -> None:
    codes = [0x10, 0x20, 0x30, 0x40]
    assert split_points(WHOLE, codes, TOPIC_COUNT_EQUALLY_DIVIDE) == [0x30]
    assert split_points(WHOLE, [0x10, 0x10], TOPIC_COUNT_EQUALLY_DIVIDE) == []


def test_only_hot_bundles_split_within_the_namespaces_maximum() -> None:
    bundles = bundles_of("public/default", 4)
    names = [TopicName.parse(f"persistent://public/default/t-{i}") for i in range(40)]
    by_bundle: dict[Bundle, list[TopicName]] = {b: [] for b in bundles}
    for name in names:
        by_bundle[next(b for b in bundles if b.contains(topic_hash(name)))].append(name)
    hot, cold = bundles[0], bundles[1]
    topics = {
        hot: [(n, BundleLoad(20_000, 0, topics=1)) for n in by_bundle[hot][:2]],
        cold: [(n, BundleLoad(10, 0, topics=1)) for n in by_bundle[cold][:2]],
    }
    chosen = bundles_to_split(topics, SplitLimits(), lambda _: 4)
    assert [bundle for bundle, _ in chosen] == [hot]
    assert bundles_to_split(topics, SplitLimits(max_bundles=4), lambda _: 4) == []
