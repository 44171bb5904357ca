"""docker/: what can be checked without a Docker daemon.

The compose file, Prometheus configuration and rules and Grafana provisioning parse and refer to
files that exist; the Dockerfile's default stage runs what `make run` runs, as a non-root user,
with the /data volume, both ports and a health check; and every metric the dashboard and the
Prometheus rules name is served by a running broker's /metrics.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import REPO, BrokerThread, close_client, new_client

DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "docker-compose.yml"
DASHBOARD = DOCKER / "grafana" / "magnetar-dashboard.json"
RULES = DOCKER / "magnetar-rules.yml"
PROMETHEUS = DOCKER / "prometheus.yml"
# Metric names in PromQL: ours and the process collector's (recording-rule names contain them).
METRIC_NAME = re.compile(r"\b((?:pulsar|magnetar|process)_[a-z0-9_]+)\b")


def load_yaml(path: Path) -> Any:
    with path.open() as stream:
        return yaml.safe_load(stream)


# --- Dockerfile --------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions as ``(KEYWORD, arguments)`` per stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, arguments = line.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), arguments.strip()))
    return stages


def instruction(stage: list[tuple[str, str]], keyword: str) -> str:
    found = [arguments for key, arguments in stage if key == keyword]
    assert found, f"no {keyword} in stage {stage[0][1]}"
    return found[-1]


def make_run_command() -> list[str]:
    """The command of `make run`'s recipe, with the venv's bin directory dropped."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^run:.*\n\t(.+)$", makefile, re.MULTILINE)
    assert recipe is not None
    return [word.removeprefix("$(VENV)/bin/") for word in shlex.split(recipe.group(1))]


def test_default_stage_runs_what_make_run_runs() -> None:
    stages = dockerfile_stages()
    base, broker = stages[0], stages[-1]
    assert instruction(broker, "FROM").endswith("AS broker")
    assert (
        json.loads(instruction(broker, "CMD")) == make_run_command() == ["magnetar", "standalone"]
    )
    # The entrypoint only maps the environment and then execs the CMD (see test_entrypoint.py).
    assert json.loads(instruction(base, "ENTRYPOINT")) == ["magnetar-entrypoint"]
    copy = instruction(base, "COPY").split()
    assert copy[-2:] == ["docker/entrypoint.sh", "/usr/local/bin/magnetar-entrypoint"]


def test_image_is_slim_non_root_with_data_volume_ports_and_health_check() -> None:
    stages = dockerfile_stages()
    base, broker = stages[0], stages[-1]
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)? AS base", instruction(base, "FROM"))
    assert instruction(broker, "USER") == "magnetar"
    assert json.loads(instruction(broker, "VOLUME")) == ["/data"]
    assert instruction(broker, "ENV") == "dataDir=/data"
    assert instruction(broker, "EXPOSE").split() == ["6650", "8080"]
    assert "/admin/v2/brokers/health" in instruction(broker, "HEALTHCHECK")
    spark = next(s for s in stages if s[0][1].endswith("AS spark-job"))
    assert instruction(spark, "USER") == "magnetar"


def test_every_copied_path_exists() -> None:
    for stage in dockerfile_stages():
        for keyword, arguments in stage:
            if keyword != "COPY":
                continue
            words = [w for w in arguments.split() if not w.startswith("--")]
            for source in words[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"


# --- compose, Prometheus, Grafana ----------------------------------------------------------------


def test_compose_file_runs_broker_prometheus_grafana_and_the_spark_job() -> None:
    compose = load_yaml(COMPOSE)
    services = compose["services"]
    assert set(services) == {"broker", "prometheus", "grafana", "spark-job"}
    broker = services["broker"]
    build = broker["build"]
    assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    assert broker["build"]["target"] == "broker"
    assert broker["ports"] == ["6650:6650", "8080:8080"]
    assert broker["volumes"] == ["magnetar-data:/data"]
    assert "magnetar-data" in compose["volumes"]
    assert services["prometheus"]["depends_on"]["broker"]["condition"] == "service_healthy"
    spark = services["spark-job"]
    assert spark["build"]["target"] == "spark-job"
    assert spark["command"][:2] == ["python", "examples/spark_pipeline.py"]
    assert spark["command"][2:] == ["--checkpoint", "/checkpoints/orders"]
    assert spark["volumes"] == ["spark-checkpoints:/checkpoints"]
    assert "spark-checkpoints" in compose["volumes"]
    assert (REPO / "examples" / "spark_pipeline.py").is_file(), "the README pipeline (issue #12)"
    # localhost:6650 in the job is the broker: the README pipeline runs unchanged.
    assert spark["network_mode"] == "service:broker"
    assert broker["environment"]["advertisedAddress"] == "localhost"


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (``./...`` sources)."""
    mounts: dict[str, Path] = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DOCKER / source).resolve()
    return mounts


def test_compose_bind_mounts_exist_and_prometheus_finds_its_rules() -> None:
    services = load_yaml(COMPOSE)["services"]
    for name, service in services.items():
        for host_path in bind_mounts(service).values():
            assert host_path.exists(), f"{name}: {host_path} is missing"
    prometheus_mounts = bind_mounts(services["prometheus"])
    assert prometheus_mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS
    config = load_yaml(PROMETHEUS)
    for rule_file in config["rule_files"]:
        assert prometheus_mounts[rule_file] == RULES
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["broker:8080"]
    grafana_mounts = bind_mounts(services["grafana"])
    assert DASHBOARD in grafana_mounts.values()
    provider = load_yaml(DOCKER / "grafana/provisioning/dashboards/magnetar.yml")
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert any(t.startswith(dashboards_dir + "/") for t in grafana_mounts)
    datasource = load_yaml(DOCKER / "grafana/provisioning/datasources/prometheus.yml")
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    variables = dashboard["templating"]["list"]
    queries.extend(v["query"]["query"] for v in variables if v["type"] == "query")
    assert queries
    return queries


def rule_queries() -> list[str]:
    rules = load_yaml(RULES)
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_recording_rules_used_by_alerts_are_defined() -> None:
    rules = [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    for rule in rules:
        for used in re.findall(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", rule["expr"]):
            assert used in recorded, used


@pytest.fixture
def served_names(broker: BrokerThread) -> set[str]:
    """Family and sample names on /metrics, with one topic producing and consuming."""
    client = new_client(broker.url)
    try:
        topic = "persistent://public/default/dashboard"
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        client.create_producer(topic).send(b"x")
        consumer.acknowledge(consumer.receive(5000))
        with urllib.request.urlopen(f"{broker.http}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        close_client(client)
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_every_metric_in_the_dashboard_and_the_rules_is_served(served_names: set[str]) -> None:
    used = {
        name
        for query in dashboard_queries() + rule_queries()
        for name in METRIC_NAME.findall(query)
    }
    assert {"pulsar_rate_in", "magnetar_storage_fsync_latency_bucket"} <= used
    missing = used - served_names
    assert not missing, f"named in docker/ but not on /metrics: {sorted(missing)}"


def test_the_spark_job_command_is_accepted_by_the_pipeline_script() -> None:
    """Every option the compose command passes is one the example's argparse lists."""
    command = load_yaml(COMPOSE)["services"]["spark-job"]["command"]
    done = subprocess.run(
        [sys.executable, *command[1:], "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    options = [word for word in command if word.startswith("--")]
    assert options == ["--checkpoint"]
    for option in options:
        assert f"[{option} " in done.stdout  # the usage line: `[--checkpoint CHECKPOINT]`
