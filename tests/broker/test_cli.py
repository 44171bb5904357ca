"""The `magnetar` CLI (click's CliRunner plus one real subprocess) and the logging it sets up.

The logging_setup tests live here because the CLI is what configures logging.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop
from click.testing import CliRunner

from broker.cli import main
from broker.config import BrokerConfig
from broker.logging_setup import RateLimitedLog, configure_logging
from broker.storage.lock import LOCKS_FILE_NAME

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """`standalone` configures the root logger; put it back so other tests are unaffected."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


# --- magnetar config --------------------------------------------------------------------------


def test_config_prints_the_defaults_as_toml(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config"])
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout) == BrokerConfig().as_dict()


def test_config_applies_file_then_sets(runner: CliRunner, tmp_path: Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('brokerServicePort = 7000\nclusterName = "from-file"\n')
    result = runner.invoke(
        main,
        ["config", "--conf", str(conf), "--set", "brokerServicePort=0", "--set", "logLevel=DEBUG"],
    )
    assert result.exit_code == 0, result.output
    shown = tomllib.loads(result.stdout)
    assert shown["brokerServicePort"] == 0
    assert shown["clusterName"] == "from-file"
    assert shown["logLevel"] == "DEBUG"


def test_later_set_of_the_same_key_wins(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["config", "--set", "webServicePort=1", "--set", "webServicePort=2"]
    )
    assert tomllib.loads(result.stdout)["webServicePort"] == 2


def test_set_with_unknown_key_exits_2_naming_the_key(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config", "--set", "brokerServicePrt=0"])
    assert result.exit_code == 2
    assert "brokerServicePrt" in result.stderr
    assert result.stdout == ""


def test_set_with_bad_value_exits_2_naming_the_key(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config", "--set", "brokerServicePort=99999"])
    assert result.exit_code == 2
    assert "brokerServicePort" in result.stderr
    assert "out of range" in result.stderr


def test_set_without_equals_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config", "--set", "brokerServicePort"])
    assert result.exit_code == 2
    assert "expected key=value" in result.stderr


def test_bad_key_in_conf_file_exits_2_naming_key_and_file(
    runner: CliRunner, tmp_path: Path
) -> None:
    conf = tmp_path / "typo.toml"
    conf.write_text("journalSyncDta = false\n")
    result = runner.invoke(main, ["config", "--conf", str(conf)])
    assert result.exit_code == 2
    assert "journalSyncDta" in result.stderr
    assert "typo.toml" in result.stderr


# --- magnetar standalone ----------------------------------------------------------------------


def test_standalone_with_bad_config_exits_2_before_starting(runner: CliRunner) -> None:
    result = runner.invoke(main, ["standalone", "--set", "logLevel=LOUD"])
    assert result.exit_code == 2
    assert "logLevel" in result.stderr


def test_standalone_without_a_server_refuses_to_pretend(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import broker.server` fail exactly as if the file were absent.
    monkeypatch.setitem(sys.modules, "broker.server", None)
    result = runner.invoke(main, ["standalone", "--set", "clusterName=probe"])
    assert result.exit_code == 1
    assert "broker not implemented" in result.stderr
    assert tomllib.loads(result.stdout)["clusterName"] == "probe"


def install_server(monkeypatch: pytest.MonkeyPatch, run_standalone: object) -> None:
    """Stand in for broker.server, which is not this module's code under test."""
    module = types.ModuleType("broker.server")
    module.run_standalone = run_standalone  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "broker.server", module)


def test_standalone_runs_the_server_on_uvloop_with_the_resolved_config(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[BrokerConfig, asyncio.AbstractEventLoop]] = []

    async def run_standalone(config: BrokerConfig) -> None:
        seen.append((config, asyncio.get_running_loop()))

    install_server(monkeypatch, run_standalone)
    result = runner.invoke(
        main, ["standalone", "--set", "brokerServicePort=0", "--set", "logLevel=DEBUG"]
    )
    assert result.exit_code == 0, result.output
    ((config, loop),) = seen
    assert config.broker_service_port == 0
    assert isinstance(loop, uvloop.Loop)
    assert logging.getLogger().level == logging.DEBUG
    assert "resolved configuration" in result.stderr
    assert "brokerServicePort = 0" in result.stderr


def test_standalone_reports_a_failing_server_with_status_1(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run_standalone(config: BrokerConfig) -> None:
        raise OSError(98, "Address already in use")

    install_server(monkeypatch, run_standalone)
    result = runner.invoke(main, ["standalone"])
    assert result.exit_code == 1
    assert "broker failed" in result.stderr
    assert "Address already in use" in result.stderr


def test_standalone_lets_a_missing_server_dependency_surface(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the absence of broker.server itself means "not implemented"; anything else is a bug.
    error = ModuleNotFoundError("No module named 'nonexistent'", name="nonexistent")

    def fail_import(name: str) -> types.ModuleType:
        raise error

    monkeypatch.setattr("broker.cli.importlib.import_module", fail_import)
    result = runner.invoke(main, ["standalone"])
    assert result.exception is error


# --- magnetar repair-topic --------------------------------------------------------------------

REPAIRED_TOPIC = "persistent://public/default/cut-me"


def _damaged_topic(data: Path) -> tuple[Path, list[bytes]]:
    """A topic with 3 sealed segments of 5 entries whose second segment has a flipped bit in
    its third record. Returns the topic folder and the payloads a repair must keep."""
    from broker.storage import Ledger, LedgerConfig
    from broker.storage.paths import topic_directory
    from protocol.topic_name import TopicName

    directory = topic_directory(data, TopicName.parse(REPAIRED_TOPIC))
    ledger = Ledger.open(directory, LedgerConfig(max_entries_per_ledger=5, preallocate_bytes=0))
    payloads = [f"entry-{index:02d}".encode() for index in range(15)]
    for payload in payloads:
        ledger.append(payload)
    ledger.flush()
    ledger.close()
    segment = directory / "00000000000000000002.seg"
    data_bytes = bytearray(segment.read_bytes())
    record = 20 + 2 * (8 + len(payloads[0]))  # header, then two records of 16 bytes
    data_bytes[record + 10] ^= 0x04
    segment.write_bytes(bytes(data_bytes))
    return directory, payloads[:7]


def _stored(directory: Path) -> list[bytes]:
    from broker.storage import Ledger, LedgerConfig, Position

    ledger = Ledger.open(directory, LedgerConfig())
    try:
        return [data for _, data in ledger.iter_entries(Position(0, -1))]
    finally:
        ledger.close()


def _files(directory: Path) -> dict[str, bytes]:
    """Every file's content, but the (empty, advisory) namespace ledger-locks file."""
    return {
        str(p): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != LOCKS_FILE_NAME
    }


def test_repair_topic_dry_run_reports_the_damage_and_changes_nothing(
    runner: CliRunner, tmp_path: Path
) -> None:
    directory, _ = _damaged_topic(tmp_path / "data")
    before = _files(tmp_path / "data")
    result = runner.invoke(
        main, ["repair-topic", REPAIRED_TOPIC, "--data-dir", str(tmp_path / "data")]
    )
    assert result.exit_code == 3, result.output
    assert f"{directory / '00000000000000000002.seg'} at byte offset 52" in result.output
    assert "keeps 7 entries (last entry kept: 2:1)" in result.output
    assert "2:2..2:4: 3 entries, 48 bytes" in result.output
    assert "3:0..3:4: 5 entries, 80 bytes" in result.output
    assert "dry run: nothing was changed" in result.output
    assert _files(tmp_path / "data") == before


def test_repair_topic_truncates_to_the_valid_prefix_and_quarantines_the_rest(
    runner: CliRunner, tmp_path: Path
) -> None:
    directory, kept = _damaged_topic(tmp_path / "data")
    result = runner.invoke(
        main,
        [
            "repair-topic",
            REPAIRED_TOPIC,
            "--set",
            f"dataDir={tmp_path / 'data'}",
            "--truncate-to-valid-prefix",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "repaired:" in result.output
    assert _stored(directory) == kept
    quarantine = tmp_path / "data" / "quarantine" / "persistent" / "public" / "default"
    moved = sorted(p.name for p in quarantine.rglob("*") if p.is_file())
    assert moved == ["00000000000000000002.seg.from-52", "00000000000000000003.seg", "repair.json"]

    again = runner.invoke(
        main, ["repair-topic", REPAIRED_TOPIC, "--data-dir", str(tmp_path / "data")]
    )
    assert again.exit_code == 0, again.output
    assert "nothing to repair" in again.output


def test_repair_topic_json_output(runner: CliRunner, tmp_path: Path) -> None:
    _damaged_topic(tmp_path / "data")
    result = runner.invoke(
        main, ["repair-topic", REPAIRED_TOPIC, "--data-dir", str(tmp_path / "data"), "--json"]
    )
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "damaged"
    assert report["dryRun"] is True
    plan = report["plan"]
    assert plan["damage"]["offset"] == 52
    assert (plan["keptEntries"], plan["droppedEntries"]) == (7, 8)
    assert [(d["ledgerId"], d["firstEntry"], d["lastEntry"]) for d in plan["dropped"]] == [
        (2, 2, 4),
        (3, 0, 4),
    ]


def test_repair_topic_refuses_a_topic_a_broker_holds(runner: CliRunner, tmp_path: Path) -> None:
    from broker.storage.lock import LedgerLock

    directory, _ = _damaged_topic(tmp_path / "data")
    before = _files(tmp_path / "data")
    lock = LedgerLock.try_acquire(directory)
    assert lock is not None
    try:
        result = runner.invoke(
            main,
            [
                "repair-topic",
                REPAIRED_TOPIC,
                "--data-dir",
                str(tmp_path / "data"),
                "--truncate-to-valid-prefix",
            ],
        )
    finally:
        lock.release()
    assert result.exit_code == 1
    assert "loaded by a running broker" in result.output
    assert _files(tmp_path / "data") == before


def test_repair_topic_refuses_unknown_topics_bad_names_and_damaged_metadata(
    runner: CliRunner, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    missing = runner.invoke(main, ["repair-topic", "nope", "--data-dir", data])
    assert missing.exit_code == 1
    assert "has no data" in missing.output

    invalid = runner.invoke(main, ["repair-topic", "non-persistent://a/b/c", "--data-dir", data])
    assert invalid.exit_code == 2

    directory, _ = _damaged_topic(tmp_path / "data")
    meta = directory / "ledger.meta"
    meta.write_bytes(meta.read_bytes()[:-1] + b"?")
    result = runner.invoke(
        main, ["repair-topic", REPAIRED_TOPIC, "--data-dir", data, "--truncate-to-valid-prefix"]
    )
    assert result.exit_code == 1
    assert f"cannot repair: {meta}" in result.output
    assert "restore ledger.meta from a backup" in result.output


# --- python -m broker -------------------------------------------------------------------------


def test_python_dash_m_broker_is_the_magnetar_command() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "broker", "config", "--set", "brokerServicePort=0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert tomllib.loads(completed.stdout)["brokerServicePort"] == 0

    completed = subprocess.run(
        [sys.executable, "-m", "broker", "config", "--set", "nope=1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert "'nope'" in completed.stderr


# --- logging_setup ----------------------------------------------------------------------------


def test_configure_logging_installs_one_formatted_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", stream=first)
    configure_logging("WARNING", stream=second)
    logging.getLogger("magnetar.test").warning("disk %s", "full")
    logging.getLogger("magnetar.test").info("not shown")
    assert first.getvalue() == ""
    (line,) = second.getvalue().splitlines()
    assert line.endswith(" WARNING magnetar.test: disk full")
    assert line[:4].isdigit()  # starts with the timestamp


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_rate_limited_log_lets_limit_through_and_counts_the_rest(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    limited = RateLimitedLog(logging.getLogger("t.rl"), limit=2, interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="t.rl"):
        results = [limited.warning("peer-a", "bad frame %d", i) for i in range(5)]
    assert results == [True, True, False, False, False]
    assert [r.getMessage() for r in caplog.records] == ["bad frame 0", "bad frame 1"]
    assert limited.suppressed_total == 3


def test_rate_limited_log_reports_suppressed_count_in_the_next_window(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    limited = RateLimitedLog(logging.getLogger("t.rl"), limit=1, interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="t.rl"):
        for _ in range(4):
            limited.warning("peer-a", "bad frame")
        clock.now += 10.0
        assert limited.warning("peer-a", "bad frame again")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "bad frame",
        "3 similar log messages ('peer-a') suppressed in the last 10 s",
        "bad frame again",
    ]


def test_rate_limited_log_keys_are_independent(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    limited = RateLimitedLog(logging.getLogger("t.rl"), limit=1, interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="t.rl"):
        assert limited.warning("peer-a", "a")
        assert not limited.warning("peer-a", "a")
        assert limited.warning("peer-b", "b")


def test_rate_limited_log_forgets_oldest_keys_beyond_max_keys(clock: FakeClock) -> None:
    limited = RateLimitedLog(
        logging.getLogger("t.rl"), limit=1, interval=10.0, max_keys=2, clock=clock
    )
    assert limited.warning("a", "x")
    assert limited.warning("b", "x")
    assert limited.warning("c", "x")  # evicts "a"
    assert not limited.warning("b", "x")  # "b" still remembered
    assert limited.warning("a", "x")  # "a" was forgotten, so it gets a fresh budget


def test_rate_limited_log_ignores_disabled_levels(clock: FakeClock) -> None:
    logger = logging.getLogger("t.rl.quiet")
    logger.setLevel(logging.ERROR)
    try:
        limited = RateLimitedLog(logger, limit=1, clock=clock)
        assert not limited.log(logging.INFO, "k", "chatty")
        assert limited.suppressed_total == 0
    finally:
        logger.setLevel(logging.NOTSET)


def test_rate_limited_log_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="limit"):
        RateLimitedLog(logging.getLogger("t.rl"), limit=0)
    with pytest.raises(ValueError, match="interval"):
        RateLimitedLog(logging.getLogger("t.rl"), interval=0)
