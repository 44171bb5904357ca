"""``LoadBalancer``: load reports, bundle splits and shedding of one broker (cluster mode).

Pulsar's ``ModularLoadManagerImpl`` has every broker write its load and a leader split hot
bundles and unload bundles of overloaded brokers. Magnetar has no leader: each broker acts on
its own bundles only, from the reports every broker publishes, which gives the same result
without an election (two brokers never act on one bundle: only its owner does).

* every ``loadBalancerReportUpdateMinIntervalMillis`` (5 s): measure the owned bundles' rates
  and put the report under the lease (``load.py``);
* every ``loadBalancerSheddingIntervalMinutes`` (1 min):
  1. split each hot bundle (``split.py``, when ``loadBalancerAutoBundleSplitEnabled``); with
     ``loadBalancerAutoUnloadSplitBundlesEnabled`` the pieces are placed as any bundle, by
     load, with what this broker knows of their topics' rates (else they all stay here);
  2. then, when ``loadBalancerSheddingEnabled``, hand at most one bundle to the least loaded
     broker if this one is above the average (``shedding.py``).

Clients of a moved bundle are closed cleanly and look their topics up again (the unload path).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from broker.cluster.boundaries import NamespaceBoundaries
from broker.cluster.bundles import Bundle, split_at, topic_hash
from broker.cluster.load import (
    BrokerLoad,
    BundleLoad,
    CpuMeter,
    LoadedTopic,
    TopicLoads,
    measure,
)
from broker.cluster.membership import BrokerInfo
from broker.cluster.placement import choose_broker
from broker.cluster.shedding import Share, choose_transfer
from broker.cluster.split import SplitLimits, bundles_to_split, split_points
from protocol.topic_name import TopicName

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BalancerSettings:
    """The ``loadBalancer*`` keys of ``broker/config.py``, in seconds."""

    report_interval: float = 5.0
    shedding_interval: float = 60.0
    grace_period: float = 1800.0
    threshold_percent: float = 10.0
    history_weight: float = 0.9  # of the earlier usage in the smoothed one (Pulsar's 0.9)
    shedding: bool = True
    auto_split: bool = True
    unload_split_bundles: bool = True
    limits: SplitLimits = field(default_factory=SplitLimits)


class BalancedCluster(Protocol):
    """What the balancer needs of ``ClusterService`` (which owns the balancer)."""

    me: BrokerInfo
    boundaries: NamespaceBoundaries

    def owned_bundles(self) -> dict[Bundle, int]: ...
    def bundle_of(self, topic: TopicName) -> Bundle: ...
    def lease_valid(self) -> bool: ...
    async def brokers(self) -> list[BrokerInfo]: ...
    async def load_reports(self) -> dict[str, BrokerLoad]: ...
    async def bundle_owners(self) -> dict[Bundle, str]: ...
    async def publish_load(self, report: BrokerLoad) -> None: ...
    async def unload(self, bundle: Bundle, *, move_to: str | None = None) -> bool: ...
    async def split(
        self, bundle: Bundle, points: list[int], targets: list[str] | None = None
    ) -> list[Bundle] | None: ...


class LoadBalancer:
    """The periodic work described in the module docstring, for ``cluster``'s broker."""

    def __init__(
        self,
        cluster: BalancedCluster,
        topics: Callable[[], Iterable[LoadedTopic]],
        settings: BalancerSettings,
    ) -> None:
        self.cluster = cluster
        self._topics = topics
        self.settings = settings
        self._task: asyncio.Task[None] | None = None
        self.last_report: BrokerLoad | None = None  # as last published
        self._unloaded: dict[str, float] = {}  # bundles we shed: name -> wall clock
        self._known_topics: dict[str, int] = {}  # bundle name -> topics, as last reported
        self._usage: dict[str, float] = {}  # broker -> CPU use, smoothed over the rounds
        self._cpu = CpuMeter()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="load balancer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        next_balance = time.monotonic() + self.settings.shedding_interval
        while True:
            await asyncio.sleep(self.settings.report_interval)
            try:
                _, topics = await self.report()
                if time.monotonic() >= next_balance:
                    next_balance = time.monotonic() + self.settings.shedding_interval
                    await self.balance(topics)
            except asyncio.CancelledError:
                raise
            except Exception:  # etcd unreachable, a bundle lost meanwhile: next round
                log.warning("load balancer: round failed", exc_info=True)

    def measure(self) -> tuple[BrokerLoad, TopicLoads]:
        cluster = self.cluster
        report, topics = measure(
            cluster.me.broker_id, cluster.owned_bundles(), self._topics(), cluster.bundle_of
        )
        since = time.time() - self.settings.grace_period
        self._unloaded = {name: at for name, at in self._unloaded.items() if at > since}
        report = dataclasses.replace(
            report,
            cpu_usage=self._cpu.usage(),
            cpu_limit=self._cpu.limit,
            recently_unloaded=dict(self._unloaded),
        )
        return report, topics

    async def report(self) -> tuple[BrokerLoad, TopicLoads]:
        """Measure and publish this broker's load."""
        report, topics = self.measure()
        if self.cluster.lease_valid():
            await self.cluster.publish_load(report)
            self.last_report = report
        return report, topics

    async def balance(self, topics: TopicLoads) -> None:
        """One round: splits first (they make hot spots movable), then one transfer."""
        if self.settings.auto_split and await self._split_hot(topics):
            return  # the reports are stale until the pieces are owned: shed next round
        if self.settings.shedding:
            await self._shed(topics)

    async def split(self, bundle: Bundle, algorithm: str, unload: bool) -> bool:
        """Split ``bundle`` now (the admin API's ``split``); False if it cannot be cut (one
        topic hash under ``topic_count_equally_divide``) or is not ours."""
        _, topics = self.measure()
        entries = topics.get(bundle)
        if entries is None:
            return False
        points = split_points(bundle, [topic_hash(name) for name, _ in entries], algorithm)
        if not points:
            return False
        targets = await self._place_pieces(bundle, points, entries) if unload else None
        return await self.cluster.split(bundle, points, targets) is not None

    async def _split_hot(self, topics: TopicLoads) -> bool:
        cluster = self.cluster
        chosen = bundles_to_split(
            topics, self.settings.limits, lambda ns: len(cluster.boundaries.bundles(ns))
        )
        for bundle, points in chosen:
            targets = None
            if self.settings.unload_split_bundles:
                targets = await self._place_pieces(bundle, points, topics[bundle])
            await cluster.split(bundle, points, targets)
        return bool(chosen)

    async def _place_pieces(
        self, bundle: Bundle, points: list[int], entries: list[tuple[TopicName, BundleLoad]]
    ) -> list[str]:
        """The broker for each piece: by load, counting the parent's traffic off this broker
        and each piece's (known from its topics) onto the broker chosen for it."""
        brokers = await self.cluster.brokers()
        rates = {r.broker_id: r.msg_rate for r in (await self.cluster.load_reports()).values()}
        me = self.cluster.me.broker_id
        pieces = split_at(bundle, points)
        piece_rates = [0.0] * len(pieces)
        for name, load in entries:
            code = topic_hash(name)
            index = next(i for i, piece in enumerate(pieces) if piece.contains(code))
            piece_rates[index] += load.msg_rate
        rates[me] = rates.get(me, 0.0) - sum(piece_rates)
        targets = [me] * len(pieces)
        # The hottest piece first: it is the one whose place matters most.
        for index in sorted(range(len(pieces)), key=lambda i: -piece_rates[i]):
            chosen = choose_broker(pieces[index], brokers, [], rates)
            if chosen is not None:
                targets[index] = chosen.broker_id
                rates[chosen.broker_id] = rates.get(chosen.broker_id, 0.0) + piece_rates[index]
        return targets

    async def _shed(self, topics: TopicLoads) -> None:
        cluster = self.cluster
        me = cluster.me.broker_id
        reports = await cluster.load_reports()
        alive = {b.broker_id for b in await cluster.brokers()}
        live = [r for b, r in reports.items() if b in alive and b != me]
        counts = self._topic_counts(live, topics, await cluster.bundle_owners())
        shares = {
            r.broker_id: Share(self._smoothed(r), r.msg_rate, counts.get(r.broker_id, 0))
            for r in live
        }
        mine = {
            bundle: Share(0.0, _rate(entries), self._known_topics.get(bundle.name, 0))
            for bundle, entries in topics.items()
        }
        usage = 0.0 if self.last_report is None else self._smoothed(self.last_report)
        shares[me] = Share(usage, sum(s.msg_rate for s in mine.values()), counts.get(me, 0))
        self._usage = {b: u for b, u in self._usage.items() if b in shares}
        since = time.time() - self.settings.grace_period
        moved = {name for r in live for name, at in r.recently_unloaded.items() if at > since}
        moved |= set(self._unloaded)
        staying = [bundle for bundle in mine if bundle.name in moved]
        transfer = choose_transfer(me, shares, mine, self.settings.threshold_percent, staying)
        if transfer is None:
            return
        bundle, target = transfer
        log.info(
            "load balancer: %s (cpu %.0f%%, %.0f msg/s, %d topics) hands %s (%.0f msg/s,"
            " %d topics) to %s (cpu %.0f%%, %.0f msg/s, %d topics)",
            me,
            shares[me].usage,
            shares[me].msg_rate,
            shares[me].topics,
            bundle.name,
            mine[bundle].msg_rate,
            mine[bundle].topics,
            target,
            shares[target].usage,
            shares[target].msg_rate,
            shares[target].topics,
        )
        self._unloaded[bundle.name] = time.time()
        await cluster.unload(bundle, move_to=target)

    def _smoothed(self, report: BrokerLoad) -> float:
        """The broker's CPU use with the history weighing ``history_weight`` (Pulsar's
        ``loadBalancerHistoryResourcePercentage``), so that a moment of idleness (clients
        reconnecting after a move) or of work (topics loading) does not move bundles."""
        earlier = self._usage.get(report.broker_id)
        weight = self.settings.history_weight
        now = report.usage_percent
        smoothed = now if earlier is None else earlier * weight + now * (1 - weight)
        self._usage[report.broker_id] = smoothed
        return smoothed

    def _topic_counts(
        self, reports: list[BrokerLoad], mine: TopicLoads, owners: dict[Bundle, str]
    ) -> dict[str, int]:
        """Topics per broker, by bundle ownership (current in etcd) and each bundle's topic
        count as last seen in any report: a bundle just moved counts for its new owner at
        once, before its clients reconnect and the new owner's report shows them."""
        for report in reports:
            for name, load in report.bundles.items():
                if load.topics:
                    self._known_topics[name] = load.topics
        for bundle, entries in mine.items():
            if entries:
                self._known_topics[bundle.name] = len(entries)
        names = {bundle.name for bundle in owners}
        self._known_topics = {n: c for n, c in self._known_topics.items() if n in names}
        counts: dict[str, int] = {}
        for bundle, owner in owners.items():
            counts[owner] = counts.get(owner, 0) + self._known_topics.get(bundle.name, 0)
        return counts


def _rate(entries: list[tuple[TopicName, BundleLoad]]) -> float:
    return sum(load.msg_rate for _, load in entries)
