"""``AutoClusterFailover``: switch to a secondary cluster when the primary cannot be reached,
and back when it can again (pulsar 3.13's cluster-level failover).

The official ``AutoClusterFailover`` is a configuration; the client turns it into a provider
(``AutoFailoverProvider``) that, as the C++ client's, probes on a thread of its own every
``check_interval_ms``: a probe is a TCP connect to each host of a cluster's service URL in turn
(reachable when one accepts; 30 s at most per host, as the C++ probe). What each round probes
and decides is ``FailoverDecisions``, free of I/O:

* on the primary: ``failover_threshold`` failed probes in a row switch to the first reachable
  secondary (in the order given); none reachable, it stays and keeps counting;
* on a secondary that answers: ``switch_back_threshold`` reachable primaries in a row switch
  back to the primary;
* on a secondary that failed ``failover_threshold`` probes in a row: the primary if it is
  reachable, else the first other reachable secondary, else it stays.

Every switch resets both counts.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Callable

from client.arguments import check_type
from client.service_info.info import ServiceInfo, ServiceInfoProvider, ServiceInfoUpdate

__all__ = ["AutoClusterFailover", "AutoFailoverProvider", "FailoverDecisions", "tcp_reachable"]

logger = logging.getLogger(__name__)

#: Bound on one TCP probe of one host, as the C++ client's.
PROBE_TIMEOUT = 30.0

Probe = Callable[[ServiceInfo], bool]


class AutoClusterFailover:
    """Cluster-level automatic failover for ``Client`` (the official
    ``pulsar.AutoClusterFailover``): pass it as the client's ``service_url``.

    Args:
        primary: the preferred cluster.
        secondary: the fallback clusters, in the order to try them (at least one).
        check_interval_ms: how often the clusters are probed.
        failover_threshold: failed probes in a row before leaving a cluster.
        switch_back_threshold: reachable primary probes in a row before going back to it.

    Raises:
        ValueError: an argument of the wrong type, no secondary, or a count or interval
            not above 0 (as the official).
    """

    def __init__(
        self,
        primary: ServiceInfo,
        secondary: list[ServiceInfo],
        check_interval_ms: int = 5000,
        failover_threshold: int = 1,
        switch_back_threshold: int = 1,
    ) -> None:
        check_type(ServiceInfo, primary, "primary")
        check_type(list, secondary, "secondary")
        check_type(int, check_interval_ms, "check_interval_ms")
        check_type(int, failover_threshold, "failover_threshold")
        check_type(int, switch_back_threshold, "switch_back_threshold")
        if not secondary:
            raise ValueError("Argument secondary is expected to contain at least one ServiceInfo")
        for index, info in enumerate(secondary):
            if not isinstance(info, ServiceInfo):
                raise ValueError(
                    f"Argument secondary[{index}] is expected to be of type 'ServiceInfo' and "
                    f"not '{type(info).__name__}'"
                )
        for name, value in (
            ("check_interval_ms", check_interval_ms),
            ("failover_threshold", failover_threshold),
            ("switch_back_threshold", switch_back_threshold),
        ):
            if value <= 0:
                raise ValueError(f"Argument {name} is expected to be greater than 0")
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_ms = check_interval_ms
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold

    def __repr__(self) -> str:
        return (
            f"AutoClusterFailover(primary={self.primary!r}, secondary={self.secondary!r}, "
            f"check_interval_ms={self.check_interval_ms!r}, "
            f"failover_threshold={self.failover_threshold!r}, "
            f"switch_back_threshold={self.switch_back_threshold!r})"
        )


class FailoverDecisions:
    """The failover rules (see the module docstring): ``check`` runs one round of probes and
    says where to switch."""

    def __init__(self, failover: AutoClusterFailover) -> None:
        self._failover = failover
        self.current = failover.primary
        self._failures = 0
        self._recoveries = 0

    def check(self, reachable: Probe) -> ServiceInfo | None:
        """Probe what this round needs; the cluster to switch to, or None to stay."""
        primary = self._failover.primary
        if self.current is primary:
            if reachable(primary):
                self._failures = 0
                return None
            self._failures += 1
            if self._failures < self._failover.failover_threshold:
                return None
            return self._switch(self._first_secondary(reachable, excluded=None))
        if reachable(self.current):
            self._failures = 0
            return self._switch_back_if_due(reachable(primary))
        self._failures += 1
        if self._failures < self._failover.failover_threshold:
            return self._switch_back_if_due(reachable(primary))
        # The secondary in use is gone: the primary at once if it is back (no switch-back
        # count: staying is no option), else another secondary.
        if reachable(primary):
            return self._switch(primary)
        other = self._first_secondary(reachable, excluded=self.current)
        if other is None:
            self._recoveries = 0
        return self._switch(other)

    def _first_secondary(
        self, reachable: Probe, excluded: ServiceInfo | None
    ) -> ServiceInfo | None:
        candidates = (info for info in self._failover.secondary if info is not excluded)
        return next((info for info in candidates if reachable(info)), None)

    def _switch_back_if_due(self, primary_reachable: bool) -> ServiceInfo | None:
        if not primary_reachable:
            self._recoveries = 0
            return None
        self._recoveries += 1
        if self._recoveries < self._failover.switch_back_threshold:
            return None
        return self._switch(self._failover.primary)

    def _switch(self, target: ServiceInfo | None) -> ServiceInfo | None:
        if target is None or target is self.current:
            return None
        self.current = target
        self._failures = 0
        self._recoveries = 0
        return target


def tcp_reachable(info: ServiceInfo, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a host of ``info``'s service URL accepts a TCP connection (tried in order)."""
    for address in info.parsed_url.addresses:
        try:
            with socket.create_connection((address.host, address.port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


_numbers = itertools.count(1)


class AutoFailoverProvider(ServiceInfoProvider):
    """The provider a client makes of an ``AutoClusterFailover``: the rules run on a daemon
    thread of its own (probes block on connects, never the client's event loop)."""

    def __init__(self, failover: AutoClusterFailover, probe: Probe = tcp_reachable) -> None:
        self._failover = failover
        self._decisions = FailoverDecisions(failover)
        self._probe = probe
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None

    def initial_service_info(self) -> ServiceInfo:
        return self._failover.primary

    def initialize(self, on_service_info_update: ServiceInfoUpdate) -> None:
        self.thread = threading.Thread(
            target=self._run,
            args=(on_service_info_update,),
            name=f"pulsar-cluster-failover-{next(_numbers)}",
            daemon=True,
        )
        self.thread.start()

    def close(self) -> None:
        """Stop probing; returns at once (a probe under way ends within its timeout and its
        outcome is dropped)."""
        self._stop.set()

    def _run(self, update: ServiceInfoUpdate) -> None:
        interval = self._failover.check_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                target = self._decisions.check(self._probe)
                if target is not None and not self._stop.is_set():
                    logger.info("cluster failover: switching to %s", target.service_url)
                    update(target)
            except Exception:  # the thread must outlive one bad round
                logger.exception("cluster failover check failed")
