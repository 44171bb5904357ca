"""Load reports: measured from the loaded topics of owned bundles, encoded with Pulsar's names."""

from __future__ import annotations

import json
from dataclasses import dataclass

from broker.cluster.bundles import bundle_of, bundles_of
from broker.cluster.load import BrokerLoad, BundleLoad, CpuMeter, measure
from protocol.topic_name import TopicName


@dataclass
class FakeTopic:
    name: TopicName
    per_second: tuple[float, float, float, float]

    def rates(self) -> tuple[float, float, float, float]:
        return self.per_second


def test_a_report_sums_the_topics_of_each_owned_bundle_and_lists_idle_bundles() -> None:
    bundles = bundles_of("public/default", 4)
    names = [TopicName.parse(f"persistent://public/default/r-{i}") for i in range(12)]
    owned = {bundle_of(names[0], 4), bundles[0], bundles[1], bundles[2], bundles[3]}
    topics = [FakeTopic(n, (10.0, 1000.0, 5.0, 500.0)) for n in names]
    other = TopicName.parse("non-persistent://public/default/volatile", allow_non_persistent=True)
    topics.append(FakeTopic(other, (1e6, 1e6, 1e6, 1e6)))  # never placed: no bundle's load
    report, per_bundle = measure("b1", owned, topics, lambda t: bundle_of(t, 4))
    assert set(report.bundles) == {b.name for b in owned}
    assert report.total.topics == 12
    assert report.msg_rate == 12 * 15.0
    assert sum(len(entries) for entries in per_bundle.values()) == 12


def test_reports_round_trip_with_pulsars_field_names() -> None:
    report = BrokerLoad(
        "127.0.0.1:8080",
        {"public/default/0x00000000_0x40000000": BundleLoad(1.0, 2.0, 3.0, 4.0, 5)},
        1700000000.0,
        150.0,
        200.0,
        {"public/default/0x40000000_0x80000000": 1700000001.0},
    )
    document = json.loads(report.encode())
    assert document["msgRateIn"] == 1.0
    assert document["numTopics"] == 5
    assert document["numBundles"] == 1
    assert document["cpu"] == {"usage": 150.0, "limit": 200.0}
    assert BrokerLoad.decode(report.encode()) == report
    assert report.usage_percent == 75.0


def test_the_cpu_meter_sees_this_process_work() -> None:
    meter = CpuMeter()
    assert meter.limit >= 100
    total = 0
    for index in range(3_000_000):  # about a second of one core
        total += index
    assert meter.usage() > 0
