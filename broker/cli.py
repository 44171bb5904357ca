"""The `magnetar` command line: `magnetar standalone` runs a broker, `magnetar config` shows
the configuration it would run with, `magnetar repair-topic` checks a topic's storage and cuts a
damaged one to its longest valid prefix (only when asked to, see `broker.storage.repair`).

Both commands resolve the configuration the same way (embedded defaults, then `--conf FILE`,
then `MAGNETAR_<key>` environment variables, then each `--set key=value`), so `magnetar config`
with the same options and environment is an exact preview.
A configuration problem prints one line naming the key and exits with status 2, the usage-error
status click uses, before anything is started.

Signals are not handled here: `broker.server.run_standalone` installs SIGINT/SIGTERM handlers
and performs the graceful shutdown itself.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from broker.auth.tokens_cli import tokens
from broker.config import BrokerConfig, ConfigError, load_config
from broker.logging_setup import configure_logging
from broker.storage.lock import LedgerLock
from broker.storage.repair import RepairPlan, apply_repair, plan_repair
from protocol.topic_name import InvalidTopicNameError, TopicName

__all__ = ["main"]

log = logging.getLogger("magnetar")

# Statuses of `standalone`: 2 = bad configuration (click's usage-error status), 1 = the broker
# failed or is not available, 130 = interrupted before the broker took over signal handling.
EXIT_CONFIG_ERROR = 2
EXIT_BROKER_FAILED = 1
EXIT_INTERRUPTED = 130


class _ConfigProblem(click.ClickException):
    exit_code = EXIT_CONFIG_ERROR


def _parse_sets(
    ctx: click.Context, param: click.Parameter, values: Sequence[str]
) -> dict[str, str]:
    """Turn repeated `--set key=value` into a dict; a later `--set` of a key wins."""
    overrides: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", ctx, param)
        overrides[key.strip()] = value.strip()
    return overrides


_F = TypeVar("_F", bound=Callable[..., Any])


def _config_options(command: _F) -> _F:
    """The options both commands take to resolve a configuration."""
    command = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_parse_sets,
        help="Override one configuration key (camelCase, as in broker.toml). Repeatable.",
    )(command)
    command = click.option(
        "--conf",
        "conf",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="TOML configuration file (see conf/broker.toml). Default: built-in defaults.",
    )(command)
    return command


def _resolve(conf: Path | None, overrides: dict[str, str]) -> BrokerConfig:
    try:
        return load_config(conf, overrides, os.environ)
    except ConfigError as exc:
        raise _ConfigProblem(f"configuration error: {exc}") from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="magnetar", prog_name="magnetar")
def main() -> None:
    """Magnetar: a standalone broker speaking the Apache Pulsar binary protocol."""


main.add_command(tokens)  # `magnetar tokens ...`, as `pulsar tokens` (broker/auth/tokens_cli.py)


@main.command()
@_config_options
def config(conf: Path | None, overrides: dict[str, str]) -> None:
    """Print the resolved configuration as TOML and exit."""
    click.echo(_resolve(conf, overrides).describe(), nl=False)


@main.command()
@_config_options
@click.pass_context
def standalone(ctx: click.Context, conf: Path | None, overrides: dict[str, str]) -> None:
    """Run a single broker with its storage in dataDir until SIGINT/SIGTERM."""
    resolved = _resolve(conf, overrides)
    configure_logging(resolved.log_level)
    log.info("resolved configuration:\n%s", resolved.describe().rstrip())
    run_standalone = _find_server()
    if run_standalone is None:
        # Never pretend to serve: show what would have run, say why it does not, and fail.
        click.echo(resolved.describe(), nl=False)
        click.echo("magnetar: broker not implemented (broker.server is missing)", err=True)
        ctx.exit(EXIT_BROKER_FAILED)
    ctx.exit(_run(run_standalone(resolved)))


_ServerMain = Callable[[BrokerConfig], Coroutine[Any, Any, None]]


def _find_server() -> _ServerMain | None:
    """`broker.server.run_standalone`, imported only when a broker is really started."""
    try:
        server = importlib.import_module("broker.server")
    except ModuleNotFoundError as exc:
        if exc.name != "broker.server":
            raise  # a missing dependency of the server is a real error, not "not implemented"
        return None
    run_standalone: _ServerMain = server.run_standalone
    return run_standalone


def _run(main_coroutine: Coroutine[Any, Any, None]) -> int:
    """Run the broker on uvloop (stdlib loop where uvloop is unavailable); return the status."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main_coroutine)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ConfigError as exc:  # found at start-up: key files, certificates, providers
        click.echo(f"magnetar: configuration error: {exc}", err=True)
        return EXIT_CONFIG_ERROR
    except Exception:
        log.exception("broker failed")
        return EXIT_BROKER_FAILED
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # e.g. Windows, where the dependency is not installed
        return None
    return uvloop.new_event_loop


# --- magnetar repair-topic --------------------------------------------------------------------

# Statuses of `repair-topic`: 0 = intact or repaired, 3 = damage found by a dry run (nothing
# changed), 1 = not repairable here (in use by a broker, no such topic, ledger.meta or a cursor
# file damaged, an I/O error), 2 = bad configuration or topic name.
EXIT_REPAIR_FAILED = 1
EXIT_DAMAGE_FOUND = 3


class _RepairRefused(click.ClickException):
    exit_code = EXIT_REPAIR_FAILED


@main.command("repair-topic")
@click.argument("topic")
@click.option(
    "--truncate-to-valid-prefix",
    "truncate",
    is_flag=True,
    help="Cut the topic to its longest valid prefix. Without it, only show what would be cut.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The broker's data directory (default: dataDir of the resolved configuration).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@_config_options
@click.pass_context
def repair_topic(
    ctx: click.Context,
    topic: str,
    truncate: bool,
    data_dir: Path | None,
    as_json: bool,
    conf: Path | None,
    overrides: dict[str, str],
) -> None:
    """Check a topic's storage and, with --truncate-to-valid-prefix, cut it to its valid prefix.

    Works on the files directly. A broker may keep running, but not with this topic loaded: a
    damaged topic never is (its load failed), and a loaded one holds its ledger lock, so the
    command refuses it. Dropped data is moved to <dataDir>/quarantine/..., never deleted.
    """
    resolved = _resolve(conf, overrides)
    data_path = data_dir if data_dir is not None else resolved.data_path
    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="TOPIC") from exc
    directory = _topic_directory(data_path, name)
    if not directory.is_dir():
        raise _RepairRefused(f"topic {name.full_name} has no data in {directory}")
    lock = LedgerLock.try_acquire(directory)
    if lock is None:
        raise _RepairRefused(
            f"topic {name.full_name} is loaded by a running broker ({directory} is locked): "
            "unload it (PUT /admin/v2/persistent/<tenant>/<namespace>/<topic>/unload) or stop "
            "the broker, then run this again"
        )
    try:
        plan = plan_repair(directory)
        report = _RepairReport(name.full_name, plan, dry_run=not truncate)
        if truncate and plan.needs_repair and not plan.blocking:
            report.quarantine = _new_quarantine(data_path, directory)
            report.after = _apply_and_check(plan, report.quarantine)
    finally:
        lock.release()
    report.emit(as_json)
    ctx.exit(report.exit_status)


def _topic_directory(data_path: Path, name: TopicName) -> Path:
    from broker.storage.paths import topic_directory  # the one name -> folder mapping

    directory: Path = topic_directory(data_path, name)
    return directory


def _new_quarantine(data_path: Path, directory: Path) -> Path:
    """``<dataDir>/quarantine/<topic folder relative to dataDir>/<UTC time>``, unused so far.

    Outside the topic folder, so that deleting the topic later keeps what a repair set aside."""
    try:
        relative = directory.relative_to(data_path)
    except ValueError:
        relative = Path(directory.name)
    base = data_path / "quarantine" / relative
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate, attempt = base / stamp, 1
    while candidate.exists():
        candidate, attempt = base / f"{stamp}-{attempt}", attempt + 1
    return candidate


def _apply_and_check(plan: RepairPlan, quarantine: Path) -> RepairPlan:
    """Carry the plan out, then plan again: the result must need no repair."""
    try:
        apply_repair(plan, quarantine)
    except OSError as exc:
        raise _RepairRefused(
            f"repair stopped by an I/O error ({exc}); the topic is still refused, nothing "
            f"dropped is lost (see {quarantine}); run the command again"
        ) from exc
    return plan_repair(plan.directory)


class _RepairReport:
    """What `repair-topic` prints, as text or JSON, and its exit status."""

    def __init__(self, topic: str, plan: RepairPlan, *, dry_run: bool) -> None:
        self.topic = topic
        self.plan = plan
        self.dry_run = dry_run
        self.quarantine: Path | None = None
        self.after: RepairPlan | None = None

    @property
    def status(self) -> str:
        if self.plan.blocking:
            return "unrepairable"
        if self.after is not None:
            repaired = not self.after.needs_repair and not self.after.blocking
            return "repaired" if repaired else "repair-failed"
        if self.plan.needs_repair:
            return "damaged"
        return "intact"

    @property
    def exit_status(self) -> int:
        status = self.status
        if status in ("unrepairable", "repair-failed"):
            return EXIT_REPAIR_FAILED
        if status == "damaged":
            return EXIT_DAMAGE_FOUND
        return EXIT_REPAIR_FAILED if self.plan.blocking_cursors else 0

    def emit(self, as_json: bool) -> None:
        if as_json:
            document = {
                "topic": self.topic,
                "status": self.status,
                "dryRun": self.dry_run,
                "plan": self.plan.to_json(),
                "quarantine": str(self.quarantine) if self.quarantine else None,
            }
            click.echo(json.dumps(document, indent=2))
            return
        click.echo(f"topic {self.topic} ({self.plan.directory})")
        for line in self.plan.describe():
            click.echo(line)
        click.echo(self._conclusion())

    def _conclusion(self) -> str:
        status = self.status
        if status == "damaged":
            return (
                "dry run: nothing was changed. Run again with --truncate-to-valid-prefix to cut "
                "the topic to its valid prefix; the dropped data is moved to "
                "<dataDir>/quarantine/, never deleted."
            )
        if status == "repaired":
            return (
                f"repaired: the topic now holds exactly the kept entries. The dropped data and "
                f"this plan (repair.json) are in {self.quarantine}."
            )
        if status == "repair-failed" and self.after is not None:
            return f"the repaired ledger still fails its check: {'; '.join(self.after.describe())}"
        if status == "unrepairable":
            return "nothing was changed."
        if self.plan.blocking_cursors:
            return "the topic still cannot be opened because of the damaged cursor file(s) above."
        return "the topic's data is intact."
