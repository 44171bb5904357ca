"""docker/entrypoint.sh outside Docker: it maps conf keys from the environment to MAGNETAR_<key>,
execs `magnetar standalone` by default (so SIGTERM reaches the broker), and the Dockerfile's
HEALTHCHECK command passes against the broker it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, wait_until

pytestmark = pytest.mark.integration

ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
SERVING = re.compile(rb"serving pulsar://[^:]+:(\d+) and http://[^:]+:(\d+)")


def entrypoint_env(**variables: str) -> dict[str, str]:
    """The test's environment without MAGNETAR_ variables, the venv's bin first on PATH (where
    `magnetar` is, as /usr/local/bin is in the image), plus ``variables``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAGNETAR_")}
    bin_dir = str(Path(sys.executable).parent)
    return {**clean, "PATH": f"{bin_dir}{os.pathsep}{clean.get('PATH', '')}", **variables}


def test_conf_keys_in_the_environment_are_mapped_and_explicit_ones_win(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ENTRYPOINT), "magnetar", "config"],
        env=entrypoint_env(
            clusterName="plain-name",  # a conf key, Pulsar-image style
            logLevel="ERROR",
            MAGNETAR_logLevel="DEBUG",  # the explicit form wins over the plain one
            dataDir=str(tmp_path / "data"),
            notAKey="ignored",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    resolved = tomllib.loads(done.stdout)
    assert resolved["clusterName"] == "plain-name"
    assert resolved["logLevel"] == "DEBUG"
    assert resolved["dataDir"] == str(tmp_path / "data")


def test_a_bad_value_stops_the_broker_with_a_message_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ENTRYPOINT)],
        env=entrypoint_env(brokerServicePort="not-a-port", dataDir=str(tmp_path / "data")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "MAGNETAR_brokerServicePort" in done.stderr


class EntrypointBroker:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.web_port = 0

    def wait_serving(self) -> None:
        def serving() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            found = SERVING.search(self.log.read_bytes())
            if found:
                self.web_port = int(found.group(2))
            return found is not None

        wait_until(serving, timeout=30)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[EntrypointBroker]:
    log = tmp_path / "broker.log"
    env = entrypoint_env(
        dataDir=str(tmp_path / "data"),
        brokerServicePort="0",
        webServicePort="0",
        bindAddress="127.0.0.1",
        advertisedAddress="127.0.0.1",
        MAGNETAR_clusterName="from-env",
    )
    with log.open("wb") as out:
        proc = subprocess.Popen([str(ENTRYPOINT)], env=env, stdout=out, stderr=subprocess.STDOUT)
    broker = EntrypointBroker(proc, log)
    try:
        yield broker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def healthcheck_command() -> str:
    dockerfile = re.sub(r"\\\n\s*", " ", (REPO / "docker" / "Dockerfile").read_text())
    found = re.search(r"^HEALTHCHECK .*? CMD (.+)$", dockerfile, re.MULTILINE)
    assert found is not None
    return found.group(1)


def run_healthcheck(web_port: int) -> int:
    """The HEALTHCHECK's shell-form command, as Docker runs it (`/bin/sh -c`)."""
    env = entrypoint_env(MAGNETAR_webServicePort=str(web_port))
    return subprocess.run(["/bin/sh", "-c", healthcheck_command()], env=env, timeout=30).returncode


def test_default_command_serves_until_sigterm(started: EntrypointBroker, tmp_path: Path) -> None:
    started.wait_serving()
    with urllib.request.urlopen(
        f"http://127.0.0.1:{started.web_port}/admin/v2/brokers/health", timeout=10
    ) as reply:
        assert reply.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{started.web_port}/metrics", timeout=10) as r:
        assert b"pulsar_rate_in" in r.read()
    assert run_healthcheck(started.web_port) == 0
    log = started.log.read_text()
    assert 'clusterName = "from-env"' in log  # the resolved configuration is logged at start
    assert f'dataDir = "{tmp_path / "data"}"' in log
    assert (tmp_path / "data").is_dir()

    # exec: the entrypoint's process *is* the broker, so `docker stop`'s SIGTERM drains it.
    started.proc.send_signal(signal.SIGTERM)
    assert started.proc.wait(30) == 0
    assert "Magnetar broker stopped" in started.log.read_text()
    assert run_healthcheck(started.web_port) != 0  # nothing answers there any more
