"""Bundle boundaries: default equal ranges, split ranges, and their stored form."""

from __future__ import annotations

import pytest

from broker.cluster.boundaries import decode, encode
from broker.cluster.bundles import (
    FULL_UPPER_BOUND,
    Bundle,
    bundle_at,
    bundle_of,
    default_boundaries,
    split_at,
    topic_hash,
)
from protocol.topic_name import TopicName


def test_a_topic_falls_in_the_range_that_holds_its_hash_after_a_split() -> None:
    boundaries = sorted({*default_boundaries(4), 0x20000000, 0x10000000})
    for index in range(200):
        name = TopicName.parse(f"persistent://public/default/b-{index}")
        bundle = bundle_at(name, boundaries)
        assert bundle.contains(topic_hash(name))
        assert bundle.lower in boundaries
        assert bundle.upper in boundaries
    # Without splits, the same answer as the equal ranges of earlier builds.
    name = TopicName.parse("persistent://public/default/kept")
    assert bundle_at(name, default_boundaries(4)) == bundle_of(name, 4)


def test_the_last_range_holds_the_full_upper_bound() -> None:
    bundles = split_at(Bundle("t/n", 0, FULL_UPPER_BOUND), [0x80000000])
    assert [b.range_name for b in bundles] == ["0x00000000_0x80000000", "0x80000000_0xffffffff"]
    assert bundles[1].contains(FULL_UPPER_BOUND)
    with pytest.raises(ValueError, match="not inside"):
        split_at(bundles[0], [0x90000000])


def test_stored_boundaries_use_pulsars_bundles_data() -> None:
    boundaries = [0, 0x40000000, 0x60000000, FULL_UPPER_BOUND]
    stored = encode(boundaries)
    assert stored == {
        "boundaries": ["0x00000000", "0x40000000", "0x60000000", "0xffffffff"],
        "numBundles": 3,
    }
    assert decode(stored) == boundaries
    with pytest.raises(ValueError, match="increase"):
        decode({"boundaries": ["0x00000000", "0x50000000", "0x40000000", "0xffffffff"]})
