"""Prometheus metrics at ``GET /metrics`` on the web port, read from the broker at scrape time.

A custom collector (prometheus-client's ``Collector`` protocol, in its own ``CollectorRegistry``)
walks the loaded topics when Prometheus scrapes, so nothing on the publish or dispatch path knows
about Prometheus: topics keep plain counters and ``Buckets``, and this module names them.

Names and labels follow Pulsar's broker (``pulsar_rate_in``, ``pulsar_msg_backlog``, ... labelled
``cluster``, ``namespace`` and, with ``exposeTopicLevelMetricsInPrometheus``, ``topic``). With
topic-level metrics off every series is summed per namespace, as Pulsar does. Differences:

* ``pulsar_storage_write_latency`` is a real Prometheus histogram (``_bucket{le="0.5"}`` ...)
  with Pulsar's bounds in milliseconds, where Pulsar prints one gauge per bucket
  (``pulsar_storage_write_latency_le_0_5``); ``histogram_quantile`` works on it as is. It
  measures SEND accepted -> entry durable, per entry.
* ``pulsar_in_messages_total`` and friends are counters (Pulsar types them as gauges).
* ``magnetar_*`` series cover what Pulsar has no name for: PIP-6 duplicates and "unknown"
  answers, PIP-68 fenced producers, and the group commit (milliseconds of write + fdatasync per
  flush, entries per flush).

Only loaded topics are reported; an unloaded topic's counters are gone, as in Pulsar.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from broker.auth.metrics import AuthCollector
from broker.storage.buckets import (
    GROUP_ENTRIES_BOUNDS,
    LATENCY_MS_BOUNDS,
    Buckets,
    BucketsSnapshot,
)

if TYPE_CHECKING:
    from broker.service import BrokerService
    from broker.topics.topic import Topic

__all__ = ["METRICS_PATH", "BrokerCollector", "add_metrics_route", "metrics_registry"]

METRICS_PATH = "/metrics"


@dataclass
class _Sample:
    """One topic's numbers (or a namespace's sum of them)."""

    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, BucketsSnapshot] = field(default_factory=dict)

    def add(self, other: _Sample) -> None:
        for name, value in other.gauges.items():
            self.gauges[name] = self.gauges.get(name, 0.0) + value
        for name, value in other.counters.items():
            self.counters[name] = self.counters.get(name, 0.0) + value
        for name, snapshot in other.histograms.items():
            mine = self.histograms.get(name)
            self.histograms[name] = snapshot if mine is None else mine.merged(snapshot)


# name -> help text. Gauges and counters are read per topic by `_topic_sample`.
_GAUGES = {
    "pulsar_rate_in": "Messages per second published to the topics",
    "pulsar_rate_out": "Messages per second dispatched to consumers",
    "pulsar_throughput_in": "Bytes per second published to the topics",
    "pulsar_throughput_out": "Bytes per second dispatched to consumers",
    "pulsar_msg_backlog": "Entries not yet acknowledged, summed over the durable subscriptions",
    "pulsar_storage_size": "Bytes of the ledger segments stored for the topics",
    "pulsar_producers_count": "Connected producers",
    "pulsar_subscriptions_count": "Subscriptions, durable and of readers",
    "pulsar_consumers_count": "Connected consumers",
    "magnetar_idempotency_keys": "Durable idempotency keys in the window (issue #16)",
}
_COUNTERS = {
    "pulsar_in_messages_total": "Messages published (a batch counts its messages)",
    "pulsar_in_bytes_total": "Bytes published",
    "pulsar_out_messages_total": "Messages dispatched to consumers",
    "pulsar_out_bytes_total": "Bytes dispatched to consumers",
    "magnetar_dedup_duplicates_total": "SENDs dropped as duplicates by PIP-6 deduplication",
    "magnetar_dedup_unknown_total": (
        "SENDs refused because their duplicate status was not known yet (write in flight)"
    ),
    "magnetar_fenced_producers_total": "Producers fenced by an exclusive producer (PIP-68)",
    "magnetar_idempotency_duplicates_total": (
        "Messages dropped or hidden because their idempotency key was in the window"
    ),
    "magnetar_idempotency_in_flight_total": (
        "Entries refused because a key's first copy was still being written (client retries)"
    ),
    "magnetar_idempotency_hidden_messages_total": (
        "Messages of stored batches hidden from every consumer as idempotency-key duplicates"
    ),
}
_HISTOGRAMS = {
    "pulsar_storage_write_latency": (
        "Milliseconds from accepting a SEND to its entry being durable",
        LATENCY_MS_BOUNDS,
    ),
    "magnetar_storage_fsync_latency": (
        "Milliseconds of write plus fdatasync per group commit",
        LATENCY_MS_BOUNDS,
    ),
    "magnetar_group_commit_entries": ("Entries written per group commit", GROUP_ENTRIES_BOUNDS),
}


def _topic_sample(topic: Topic) -> _Sample:
    rate_in, throughput_in, rate_out, throughput_out = topic.rates()
    _, bytes_in, msg_out, bytes_out = topic.rate_counters()
    subscriptions = list(topic.subscriptions.values())
    dedup = topic.dedup.stats() if topic.dedup is not None else {}
    window = topic.idempotency.stats() if topic.idempotency is not None else {}
    fenced = topic.producers.access.stats().fenced
    sync_latency, group_entries = topic.ledger.group_commit_stats()
    return _Sample(
        gauges={
            "pulsar_rate_in": rate_in,
            "pulsar_rate_out": rate_out,
            "pulsar_throughput_in": throughput_in,
            "pulsar_throughput_out": throughput_out,
            "pulsar_msg_backlog": float(sum(s.backlog() for s in subscriptions if s.durable)),
            "pulsar_storage_size": float(topic.ledger.stats()["stored_bytes"]),
            "pulsar_producers_count": float(sum(1 for p in topic.producers.producers if p.ready)),
            "pulsar_subscriptions_count": float(len(subscriptions)),
            "pulsar_consumers_count": float(sum(len(s.consumers) for s in subscriptions)),
            "magnetar_idempotency_keys": float(_int(window.get("keys"))),
        },
        counters={
            "pulsar_in_messages_total": float(topic.stats.msg_in),
            "pulsar_in_bytes_total": float(bytes_in),
            "pulsar_out_messages_total": float(msg_out),
            "pulsar_out_bytes_total": float(bytes_out),
            "magnetar_dedup_duplicates_total": float(_int(dedup.get("duplicates_dropped"))),
            "magnetar_dedup_unknown_total": float(_int(dedup.get("unknown_answers"))),
            "magnetar_fenced_producers_total": float(fenced),
            "magnetar_idempotency_duplicates_total": float(
                _int(window.get("duplicatesDropped")) + _int(window.get("hiddenMessages"))
            ),
            "magnetar_idempotency_in_flight_total": float(_int(window.get("inFlightAnswers"))),
            "magnetar_idempotency_hidden_messages_total": float(_int(window.get("hiddenMessages"))),
        },
        histograms={
            "pulsar_storage_write_latency": topic.stats.publish_latency_ms.snapshot(),
            "magnetar_storage_fsync_latency": sync_latency,
            "magnetar_group_commit_entries": group_entries,
        },
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


class BrokerCollector(Collector):
    """Reads every loaded topic of ``service`` when collected (on the event loop: the
    ``/metrics`` handler runs there, so the topics are not changing underneath)."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def collect(self) -> Iterable[Metric]:
        cluster = self._service.config.cluster_name
        per_topic = self._service.config.expose_topic_level_metrics_in_prometheus
        label_names = ["cluster", "namespace", "topic"] if per_topic else ["cluster", "namespace"]
        series: dict[tuple[str, ...], _Sample] = {}
        topics_per_namespace: dict[str, int] = {}
        for topic in list(self._service.topics.values()):
            namespace = topic.name.namespace_name
            topics_per_namespace[namespace] = topics_per_namespace.get(namespace, 0) + 1
            labels = (
                (cluster, namespace, topic.name.full_name) if per_topic else (cluster, namespace)
            )
            series.setdefault(labels, _Sample()).add(_topic_sample(topic))
        yield _topics_count(cluster, topics_per_namespace)
        yield _cache_used(cluster, self._service.entry_cache.size_bytes)
        yield from _families(label_names, series)


def _topics_count(cluster: str, topics_per_namespace: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(
        "pulsar_topics_count", "Loaded topics", labels=["cluster", "namespace"]
    )
    for namespace, count in sorted(topics_per_namespace.items()):
        family.add_metric([cluster, namespace], count)
    return family


def _cache_used(cluster: str, size_bytes: int) -> Metric:
    # Pulsar's managed-ledger cache gauge: one per broker, since the cache is.
    family = GaugeMetricFamily(
        "pulsar_ml_cache_used_size",
        "Bytes of entries in the broker's entry cache (managedLedgerCacheSizeMB)",
        labels=["cluster"],
    )
    family.add_metric([cluster], size_bytes)
    return family


def _families(label_names: list[str], series: dict[tuple[str, ...], _Sample]) -> Iterator[Metric]:
    """Every family, even with no topic loaded, so dashboards and alerts find the names."""
    ordered = sorted(series.items())
    for name, help_text in _GAUGES.items():
        gauge = GaugeMetricFamily(name, help_text, labels=label_names)
        for labels, sample in ordered:
            gauge.add_metric(list(labels), sample.gauges[name])
        yield gauge
    for name, help_text in _COUNTERS.items():
        counter = CounterMetricFamily(name, help_text, labels=label_names)
        for labels, sample in ordered:
            counter.add_metric(list(labels), sample.counters[name])
        yield counter
    for name, (help_text, bounds) in _HISTOGRAMS.items():
        histogram = HistogramMetricFamily(name, help_text, labels=label_names)
        for labels, sample in ordered:
            snapshot = sample.histograms.get(name, Buckets.empty_snapshot(bounds))
            histogram.add_metric(list(labels), _buckets(snapshot), snapshot.total)
        yield histogram


def _buckets(snapshot: BucketsSnapshot) -> list[tuple[str, float]]:
    return [(_le(bound), float(count)) for bound, count in snapshot.cumulative()]


def _le(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return f"{bound:g}"


def metrics_registry(service: BrokerService) -> CollectorRegistry:
    """A registry of its own (the global one is shared by everything in the process, tests
    included): the broker collector plus the process's CPU, memory and file descriptors."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(service))
    registry.register(AuthCollector(service.security.authentication))  # broker/auth/metrics.py
    ProcessCollector(registry=registry)
    return registry


def add_metrics_route(app: web.Application, service: BrokerService) -> None:
    """Serve ``GET /metrics`` (text format, or OpenMetrics when the scraper asks for it)."""
    app.router.add_get(METRICS_PATH, make_aiohttp_handler(metrics_registry(service)))
