"""Authentication counters on ``/metrics``, under Pulsar's names:
``pulsar_authentication_success_total`` and ``pulsar_authentication_failures_total``, labelled
by ``auth_method`` (``none`` for requests no provider could take)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.auth.providers import AuthenticationService

__all__ = ["AuthCollector"]


class AuthCollector(Collector):
    def __init__(self, authentication: AuthenticationService) -> None:
        self._authentication = authentication

    def collect(self) -> Iterable[Metric]:
        for name, counts, help_text in (
            ("pulsar_authentication_success", self._authentication.successes, "Authentications"),
            (
                "pulsar_authentication_failures",
                self._authentication.failures,
                "Failed authentications",
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["auth_method"])
            for method, count in sorted(counts.items()):
                family.add_metric([method], count)
            yield family
