"""Cluster failover (pulsar 3.13): ``ServiceInfo``, ``ServiceInfoProvider``,
``AutoClusterFailover``; how a client switches clusters is ``active``.

Modules: ``info`` (the two official base types), ``auto_failover`` (the official failover
configuration and its prober), ``active`` (the client's cluster in use and the switch).
"""

from client.service_info.auto_failover import AutoClusterFailover
from client.service_info.info import ServiceInfo, ServiceInfoProvider

__all__ = ["AutoClusterFailover", "ServiceInfo", "ServiceInfoProvider"]
