"""Placement of unowned bundles: least loaded, deterministic ties, preallocations counted."""

from __future__ import annotations

from broker.cluster.bundles import bundles_of
from broker.cluster.membership import BrokerInfo
from broker.cluster.placement import Preallocations, choose_broker

BROKERS = [BrokerInfo(f"127.0.0.1:{port}", "", "", "", "") for port in (8081, 8082, 8083)]


def test_the_least_loaded_broker_gets_the_bundle() -> None:
    bundle = bundles_of("public/default", 4)[0]
    owners = ["127.0.0.1:8081", "127.0.0.1:8081", "127.0.0.1:8083"]
    chosen = choose_broker(bundle, BROKERS, owners)
    assert chosen is not None
    assert chosen.broker_id == "127.0.0.1:8082"


def test_ties_break_the_same_way_whatever_the_order_of_the_brokers() -> None:
    for bundle in bundles_of("public/default", 16):
        forward = choose_broker(bundle, BROKERS, [])
        backward = choose_broker(bundle, list(reversed(BROKERS)), [])
        assert forward == backward


def test_no_live_broker_means_no_candidate() -> None:
    assert choose_broker(bundles_of("public/default", 1)[0], [], []) is None


def test_bundles_placed_at_once_from_one_empty_view_spread_over_every_broker() -> None:
    """The partitions of one topic looked up together: without counting the bundles already
    placed, each sees no owner and the hash alone may pick one broker for all of them."""
    bundles = bundles_of("public/default", 6)
    placed = Preallocations()
    for bundle in bundles:
        chosen = choose_broker(bundle, BROKERS, placed.loads())
        assert chosen is not None
        placed.place(bundle, chosen.broker_id, now=0.0)
    assert sorted(placed.loads()) == sorted([b.broker_id for b in BROKERS] * 2)
    assert placed.candidate(bundles[0]) is not None


def test_a_preallocation_ends_when_the_bundle_is_owned_or_it_expires() -> None:
    first, second, third = bundles_of("public/default", 3)
    placed = Preallocations(ttl=5.0)
    placed.place(first, "127.0.0.1:8081", now=0.0)
    placed.place(second, "127.0.0.1:8082", now=3.0)
    placed.place(third, "127.0.0.1:8083", now=3.0)
    placed.forget_settled([third], now=4.0)  # third is owned now: its owner key counts it
    assert placed.candidate(third) is None
    assert placed.candidate(first) == "127.0.0.1:8081"
    placed.forget_settled([], now=5.0)
    assert placed.candidate(first) is None
    assert placed.loads() == ["127.0.0.1:8082"]
