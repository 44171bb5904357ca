"""Load reports: what each broker publishes about its traffic, per bundle (cluster mode).

Pulsar's brokers write ``LocalBrokerData`` (message rates and throughput in and out, topic and
bundle counts, ``lastStats`` per bundle) under ``/loadbalance/brokers/<broker>`` and the load
manager places, splits and sheds bundles from them. Magnetar writes the same fields, with
Pulsar's names, under ``loadbalance/brokers/<brokerId>`` attached to the broker's lease, so a
dead broker's report disappears with it. The rates are the topics' own (``Topic.rates``: a
sliding 10 s window, which plays the part of Pulsar's long-term averages).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.cluster.bundles import Bundle
from broker.rates import RateMeter
from protocol.topic_name import PERSISTENT, TopicName


class LoadedTopic(Protocol):
    """What a report needs of a loaded topic (``broker.topics.topic.Topic``)."""

    @property
    def name(self) -> TopicName: ...

    def rates(self) -> tuple[float, float, float, float]: ...


@dataclass(frozen=True, slots=True)
class BundleLoad:
    """One bundle's traffic (Pulsar's ``NamespaceBundleStats``)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0  # bytes per second
    throughput_out: float = 0.0
    topics: int = 0

    @property
    def msg_rate(self) -> float:
        """Messages in plus out per second: the load the placement weighs."""
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out

    def plus(self, other: BundleLoad) -> BundleLoad:
        return BundleLoad(
            self.msg_rate_in + other.msg_rate_in,
            self.msg_rate_out + other.msg_rate_out,
            self.throughput_in + other.throughput_in,
            self.throughput_out + other.throughput_out,
            self.topics + other.topics,
        )

    def to_json(self) -> dict[str, float | int]:
        return {
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.throughput_in,
            "msgThroughputOut": self.throughput_out,
            "topics": self.topics,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> BundleLoad:
        def number(name: str) -> float:
            value = data.get(name, 0)
            return float(value) if isinstance(value, int | float) else 0.0

        return cls(
            number("msgRateIn"),
            number("msgRateOut"),
            number("msgThroughputIn"),
            number("msgThroughputOut"),
            int(number("topics")),
        )


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """One broker's report (Pulsar's ``LocalBrokerData``); ``bundles`` by bundle name."""

    broker_id: str
    bundles: dict[str, BundleLoad] = field(default_factory=dict)
    timestamp: float = 0.0  # wall clock of the report, for people reading etcd
    #: The process's CPU use over the last window, in percent of what it may use (100 per
    #: core of its affinity; Pulsar's ``cpu.usage`` / ``cpu.limit``).
    cpu_usage: float = 0.0
    cpu_limit: float = 100.0
    #: Bundles this broker shed lately (name -> wall clock of the move): every broker leaves
    #: them where they are for the grace period (Pulsar's ``recentlyUnloadedBundles``).
    recently_unloaded: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> BundleLoad:
        result = BundleLoad()
        for load in self.bundles.values():
            result = result.plus(load)
        return result

    @property
    def msg_rate(self) -> float:
        return self.total.msg_rate

    def encode(self) -> bytes:
        total = self.total
        document = {
            "brokerId": self.broker_id,
            **{k: v for k, v in total.to_json().items() if k != "topics"},
            "numTopics": total.topics,
            "numBundles": len(self.bundles),
            "lastStats": {name: load.to_json() for name, load in sorted(self.bundles.items())},
            "lastUpdate": int(self.timestamp * 1000),
            "cpu": {"usage": round(self.cpu_usage, 1), "limit": self.cpu_limit},
            "recentlyUnloadedBundles": {
                name: int(at * 1000) for name, at in sorted(self.recently_unloaded.items())
            },
        }
        return json.dumps(document, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> BrokerLoad:
        document = json.loads(data)
        stats = document.get("lastStats") or {}
        bundles = {str(name): BundleLoad.from_json(load) for name, load in stats.items()}
        unloaded = document.get("recentlyUnloadedBundles") or {}
        cpu = document.get("cpu") or {}
        return cls(
            str(document["brokerId"]),
            bundles,
            float(document.get("lastUpdate", 0)) / 1000,
            float(cpu.get("usage", 0.0)),
            float(cpu.get("limit", 100.0)),
            {str(name): float(at) / 1000 for name, at in unloaded.items()},
        )

    @property
    def usage_percent(self) -> float:
        """CPU use in percent of the limit (what the shedding compares)."""
        return 100 * self.cpu_usage / self.cpu_limit if self.cpu_limit > 0 else 0.0


TopicLoads = dict[Bundle, list[tuple[TopicName, BundleLoad]]]


def measure(
    broker_id: str,
    owned: Iterable[Bundle],
    topics: Iterable[LoadedTopic],
    bundle_of: Callable[[TopicName], Bundle],
) -> tuple[BrokerLoad, TopicLoads]:
    """This broker's report over the bundles it ``owned`` (idle ones too), and each bundle's
    topics with their loads (what a split needs). Topics outside them (non-persistent ones,
    which are never placed) are not part of any bundle's load."""
    per_bundle: TopicLoads = {bundle: [] for bundle in owned}
    for topic in topics:
        if topic.name.domain != PERSISTENT:
            continue
        entries = per_bundle.get(bundle_of(topic.name))
        if entries is None:
            continue
        rate_in, throughput_in, rate_out, throughput_out = topic.rates()
        entries.append(
            (topic.name, BundleLoad(rate_in, rate_out, throughput_in, throughput_out, 1))
        )
    totals = {}
    for bundle, entries in per_bundle.items():
        total = BundleLoad()
        for _, load in entries:
            total = total.plus(load)
        totals[bundle.name] = total
    return BrokerLoad(broker_id, totals, time.time()), per_bundle


class CpuMeter:
    """This process's CPU use (all its threads) over a sliding window, as a ``RateMeter`` of
    CPU microseconds; 100 per core used."""

    def __init__(self) -> None:
        self._meter = RateMeter([self._micros()])
        self.limit = 100.0 * len(os.sched_getaffinity(0))

    @staticmethod
    def _micros() -> int:
        return int(time.process_time() * 1_000_000)

    def usage(self) -> float:
        now = [self._micros()]
        self._meter.sample(now)
        return self._meter.rates(now)[0] / 10_000  # µs per s -> percent of one core
