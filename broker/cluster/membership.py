"""Broker membership and the etcd key layout of cluster mode.

Every key lives under ``/magnetar/<clusterName>/`` and is attached to the broker's lease, so a
broker that stops refreshing it (dead, paused, cut off from etcd) disappears with everything it
owns after the TTL::

    brokers/<brokerId>                  BrokerInfo (JSON): this broker's advertised URLs
    owners/<tenant>/<ns>/<0x..._0x...>  BrokerInfo of the bundle's owner; the key's
                                        create_revision is the ownership epoch
    assign/<tenant>/<ns>/<0x..._0x...>  broker id an unload moves the bundle to (a hint)
    loadbalance/brokers/<brokerId>      the broker's load report (``load.py``)

and, not under any lease (metadata that outlives brokers)::

    bundles/<tenant>/<ns>               the namespace's bundle boundaries once one of its
                                        bundles was split (``boundaries.py``)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from broker.cluster.bundles import Bundle
from broker.metadata.layout import cluster_root


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What a lookup needs to send a client to a broker (Pulsar's ``LookupData``)."""

    broker_id: str  # advertisedAddress:webServicePort, as Pulsar names brokers
    service_url: str
    service_url_tls: str
    web_url: str
    web_url_tls: str

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> BrokerInfo:
        fields = json.loads(data)
        return cls(
            str(fields["broker_id"]),
            str(fields["service_url"]),
            str(fields["service_url_tls"]),
            str(fields["web_url"]),
            str(fields["web_url_tls"]),
        )


class Keys:
    """The key names of one cluster."""

    def __init__(self, cluster_name: str) -> None:
        self.root = cluster_root(cluster_name)
        self.brokers = f"{self.root}brokers/"
        self.owners = f"{self.root}owners/"
        self.assignments = f"{self.root}assign/"
        self.load_reports = f"{self.root}loadbalance/brokers/"
        self.boundaries = f"{self.root}bundles/"

    def broker(self, broker_id: str) -> str:
        return f"{self.brokers}{broker_id}"

    def owner(self, bundle: Bundle) -> str:
        return f"{self.owners}{bundle.name}"

    def assignment(self, bundle: Bundle) -> str:
        return f"{self.assignments}{bundle.name}"

    def load_report(self, broker_id: str) -> str:
        return f"{self.load_reports}{broker_id}"
