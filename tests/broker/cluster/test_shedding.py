"""Which bundle a broker hands over, to whom: CPU above the average, else topic counts."""

from __future__ import annotations

from broker.cluster.bundles import bundles_of
from broker.cluster.shedding import Share, choose_transfer

B = bundles_of("public/default", 8)


def test_a_broker_above_the_average_hands_the_bundle_that_best_evens_the_usage() -> None:
    brokers = {"a": Share(90, 9000, 3), "b": Share(10, 1000, 3)}
    mine = {B[0]: Share(0, 5000, 1), B[1]: Share(0, 3500, 1), B[2]: Share(0, 500, 1)}
    # Bundle shares of a's 90 %: 50, 35, 5; the gap is 80: 35 lands nearest 40.
    assert choose_transfer("a", brokers, mine, 10) == (B[1], "b")


def test_no_transfer_that_would_only_move_the_hot_spot() -> None:
    brokers = {"a": Share(90, 9000, 1), "b": Share(10, 0, 0)}
    assert choose_transfer("a", brokers, {B[0]: Share(0, 9000, 1)}, 10) is None


def test_within_the_threshold_nobody_sheds_by_usage_and_the_grace_period_holds() -> None:
    brokers = {"a": Share(55, 9000, 2), "b": Share(50, 1000, 2)}
    assert choose_transfer("a", brokers, {B[0]: Share(0, 4500, 1)}, 10) is None
    hot = {"a": Share(90, 9000, 2), "b": Share(10, 1000, 2)}
    mine = {B[0]: Share(0, 4500, 1), B[1]: Share(0, 4500, 1)}
    assert choose_transfer("a", hot, mine, 10, staying=[B[0], B[1]]) is None


def test_saturated_brokers_even_out_their_topics() -> None:
    # Both at full CPU, same rate: the one with 5 topics gives one to the one with 3.
    brokers = {"a": Share(98, 3_000_000, 5), "b": Share(97, 3_000_000, 3)}
    mine = {B[i]: Share(0, 600_000, 1) for i in range(5)}
    chosen = choose_transfer("a", brokers, mine, 10)
    assert chosen is not None
    assert chosen[1] == "b"
    # 4 against 4: nothing to gain.
    even = {"a": Share(98, 3_000_000, 4), "b": Share(97, 3_000_000, 4)}
    assert choose_transfer("a", even, mine, 10) is None


def test_topics_never_go_to_a_busier_broker() -> None:
    brokers = {"a": Share(20, 100, 6), "b": Share(60, 9000, 1)}
    mine = {B[i]: Share(0, 10, 1) for i in range(6)}
    assert choose_transfer("a", brokers, mine, 10) is None
