"""Placement by reported load (LeastLongTermMessageRate), bundle counts as the tie-break."""

from __future__ import annotations

from broker.cluster.bundles import bundles_of
from broker.cluster.membership import BrokerInfo
from broker.cluster.placement import Preallocations, choose_broker

BROKERS = [BrokerInfo(f"127.0.0.1:{port}", "", "", "", "") for port in (8081, 8082)]
BUSY, IDLE = (b.broker_id for b in BROKERS)


def test_the_least_loaded_broker_wins_even_with_more_bundles() -> None:
    bundle = bundles_of("public/default", 4)[3]
    owners = [BUSY, IDLE, IDLE]
    chosen = choose_broker(bundle, BROKERS, owners, {BUSY: 500.0, IDLE: 0.0})
    assert chosen is not None
    assert chosen.broker_id == IDLE


def test_equal_rates_fall_back_to_bundle_counts() -> None:
    bundle = bundles_of("public/default", 4)[3]
    chosen = choose_broker(bundle, BROKERS, [IDLE, IDLE, BUSY], {BUSY: 3.0, IDLE: 3.0})
    assert chosen is not None
    assert chosen.broker_id == BUSY


def test_preallocated_bundles_carry_their_expected_rate() -> None:
    placed = Preallocations()
    first, second = bundles_of("public/default", 2)
    placed.place(first, IDLE, now=0.0, rate=800.0)
    assert placed.rates() == {IDLE: 800.0}
    chosen = choose_broker(second, BROKERS, placed.loads(), {BUSY: 500.0, **placed.rates()})
    assert chosen is not None
    assert chosen.broker_id == BUSY
