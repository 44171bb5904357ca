"""``magnetar-admin`` end to end against a running broker: tables by default, ``--json`` for
scripts, exit codes (0 done, 1 refused by the broker, 2 bad usage, 3 broker unreachable) and
messages that say what failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest
from click.testing import CliRunner, Result

from broker.admin_cli import main
from tests.helpers import REPO, BrokerThread, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def run(broker: BrokerThread, *args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(
        main, ["--admin-url", broker.http, *args], env={"COLUMNS": "200"}, catch_exceptions=False
    )


def ok(broker: BrokerThread, *args: str) -> str:
    result = run(broker, *args)
    assert result.exit_code == 0, (args, result.output)
    return result.output


def as_json(broker: BrokerThread, *args: str) -> Any:
    return json.loads(ok(broker, *args, "--json"))


def test_clusters_tenants_namespaces(broker: BrokerThread) -> None:
    assert "standalone" in ok(broker, "clusters", "list")
    assert as_json(broker, "clusters", "list") == ["standalone"]
    assert "Created tenant acme" in ok(broker, "tenants", "create", "acme")
    assert as_json(broker, "tenants", "list") == ["acme", "public", "pulsar"]
    table = ok(broker, "tenants", "list")
    assert "acme" in table
    assert "pulsar" in table

    assert "Created namespace acme/orders" in ok(broker, "namespaces", "create", "acme/orders")
    assert as_json(broker, "namespaces", "list", "acme") == ["acme/orders"]
    ok(broker, "namespaces", "set-deduplication", "acme/orders", "--enable")
    assert as_json(broker, "namespaces", "get-deduplication", "acme/orders") is True
    ok(broker, "namespaces", "set-deduplication", "acme/orders", "--disable")
    ok(broker, "namespaces", "set-retention", "acme/orders", "--time", "3h", "--size", "2G")
    assert as_json(broker, "namespaces", "get-retention", "acme/orders") == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 2048,
    }
    ok(broker, "namespaces", "set-message-ttl", "acme/orders", "--messageTTL", "60")
    policies = as_json(broker, "namespaces", "policies", "acme/orders")
    assert policies["deduplicationEnabled"] is False
    assert policies["message_ttl_in_seconds"] == 60
    assert "retention_policies" in ok(broker, "namespaces", "policies", "acme/orders")

    refused = run(broker, "tenants", "delete", "acme")
    assert refused.exit_code == 1
    assert "HTTP 409" in refused.output
    assert "still has active namespaces" in refused.output
    ok(broker, "namespaces", "delete", "acme/orders")
    ok(broker, "tenants", "delete", "acme")


def test_topics_and_partitioned_topics(broker: BrokerThread) -> None:
    ok(broker, "topics", "create-partitioned-topic", "persistent://public/default/p", "-p", "4")
    assert as_json(broker, "topics", "get-partitioned-topic-metadata", "p")["partitions"] == 4
    ok(broker, "topics", "update-partitioned-topic", "public/default/p", "-p", "6")
    assert as_json(broker, "topics", "get-partitioned-topic-metadata", "p")["partitions"] == 6

    shrink = run(broker, "topics", "update-partitioned-topic", "p", "-p", "2")
    assert shrink.exit_code == 1
    assert "HTTP 422" in shrink.output
    assert "can't less than current partitions 6" in shrink.output

    ok(broker, "topics", "create", "plain")
    listed = as_json(broker, "topics", "list", "public/default")
    assert "persistent://public/default/plain" in listed
    assert "persistent://public/default/p-partition-5" in listed
    assert "p-partition-5" in ok(broker, "topics", "list", "public/default")
    assert as_json(broker, "topics", "list-partitioned-topics", "public/default") == [
        "persistent://public/default/p"
    ]

    ok(broker, "topics", "delete-partitioned-topic", "p")
    ok(broker, "topics", "unload", "plain")
    ok(broker, "topics", "delete", "plain")
    assert as_json(broker, "topics", "list", "public/default") == []
    missing = run(broker, "topics", "delete", "plain")
    assert missing.exit_code == 1
    assert "HTTP 404" in missing.output


def test_stats_subscriptions_and_reset_cursor(broker: BrokerThread) -> None:
    topic = "persistent://public/default/s"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic, producer_name="writer", batching_enabled=False)
        ids = [producer.send(b"m%d" % index) for index in range(4)]
        ok(broker, "topics", "create-subscription", topic, "-s", "sub", "-m", "earliest")
        assert as_json(broker, "topics", "subscriptions", topic) == ["sub"]

        stats = as_json(broker, "topics", "stats", topic)
        assert stats["msgInCounter"] == 4
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 4
        table = ok(broker, "topics", "stats", topic)
        assert "writer" in table
        assert "Shared" in table  # the publisher's access mode
        assert "sub" in table

        internal = ok(broker, "topics", "stats-internal", topic)
        assert "markDeletePosition" in internal
        assert as_json(broker, "topics", "stats-internal", topic)["numberOfEntries"] == 4

        ok(broker, "topics", "clear-backlog", topic, "-s", "sub")
        assert as_json(broker, "topics", "stats", topic)["subscriptions"]["sub"]["msgBacklog"] == 0
        ok(broker, "topics", "reset-cursor", topic, "-s", "sub", "-t", "1h")
        assert as_json(broker, "topics", "stats", topic)["subscriptions"]["sub"]["msgBacklog"] == 4
        second = f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
        ok(broker, "topics", "reset-cursor", topic, "-s", "sub", "-m", second)
        assert as_json(broker, "topics", "stats", topic)["subscriptions"]["sub"]["msgBacklog"] == 3

        usage = run(broker, "topics", "reset-cursor", topic, "-s", "sub")
        assert usage.exit_code == 2
        assert "exactly one of" in usage.output
        bad_id = run(broker, "topics", "reset-cursor", topic, "-s", "sub", "-m", "x:y")
        assert bad_id.exit_code == 2
        nobody = run(broker, "topics", "reset-cursor", topic, "-s", "nobody", "-t", "1m")
        assert nobody.exit_code == 1
        assert "Subscription not found" in nobody.output
        ok(broker, "topics", "unsubscribe", topic, "-s", "sub")
        terminated = ok(broker, "topics", "terminate", topic)
        assert f"last message: {ids[-1].ledger_id()}:{ids[-1].entry_id()}" in terminated
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"late")
    finally:
        close_client(client)


def test_bad_names_and_units_are_usage_errors(broker: BrokerThread) -> None:
    bad_topic = run(broker, "topics", "stats", "persistent://public/default/..")
    assert bad_topic.exit_code == 2
    bad_size = run(broker, "namespaces", "set-retention", "public/default", "-t", "1h", "-s", "9Q")
    assert bad_size.exit_code == 2
    assert "unknown unit" in bad_size.output
    assert run(broker, "namespaces", "set-deduplication", "public/default").exit_code == 2


def test_console_script_reports_an_unreachable_broker(broker: BrokerThread) -> None:
    """The installed entry point, as a process: output, exit codes, and an unreachable broker."""
    script = Path(sys.executable).parent / "magnetar-admin"  # [project.scripts]
    listed = subprocess.run(
        [
            str(script),
            "--admin-url",
            broker.http,
            "--json",
            "tenants",
            "list",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == ["public", "pulsar"]
    unreachable = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.admin_cli",
            "--admin-url",
            "http://127.0.0.1:1",
            "tenants",
            "list",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unreachable.returncode == 3
    assert "cannot reach the broker at http://127.0.0.1:1" in unreachable.stderr


def test_official_client_sees_a_partitioned_topic_made_by_the_cli(broker: BrokerThread) -> None:
    ok(broker, "topics", "create-partitioned-topic", "cli-made", "-p", "3")
    client = new_client(broker.url)
    try:
        consumer = client.subscribe(
            "cli-made", "sub", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer("cli-made")
        for index in range(9):
            producer.send(b"%d" % index, partition_key=str(index))
        received = sorted(int(consumer.receive(5000).data()) for _ in range(9))
        assert received == list(range(9))
    finally:
        close_client(client)
