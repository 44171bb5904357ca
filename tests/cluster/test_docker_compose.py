"""docker/docker-compose.cluster.yml: etcd plus three brokers over one shared data volume, each
configured with keys the broker accepts (checked against the real configuration loader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from broker.config import load_config

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "docker-compose.cluster.yml"


def test_the_cluster_compose_file_describes_etcd_and_three_brokers() -> None:
    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    brokers = {name: s for name, s in services.items() if name.startswith("broker-")}
    assert len(brokers) == 3
    assert "etcd" in services
    ports = set()
    for service in brokers.values():
        environment = {key: str(value) for key, value in service["environment"].items()}
        config = load_config(None, overrides=environment)
        assert config.metadata_store_url == "etcd:http://etcd:2379"
        assert config.metadata_store_session_timeout_millis <= 10_000
        assert service["volumes"] == ["magnetar-shared:/data"]  # one shared dataDir
        assert service["depends_on"]["etcd"]["condition"] == "service_healthy"
        ports.add((config.broker_service_port, config.web_service_port))
        published = {p.split(":")[0] for p in service["ports"]}
        assert published == {str(config.broker_service_port), str(config.web_service_port)}
    assert len(ports) == 3  # distinct, so all are reachable from the host
