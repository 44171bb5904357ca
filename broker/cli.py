"""The `magnetar` command line: `magnetar standalone` runs a broker, `magnetar config` shows
the configuration it would run with.

Both commands resolve the configuration the same way (embedded defaults, then `--conf FILE`,
then each `--set key=value`), so `magnetar config` with the same options is an exact preview.
A configuration problem prints one line naming the key and exits with status 2, the usage-error
status click uses, before anything is started.

Signals are not handled here: `broker.server.run_standalone` installs SIGINT/SIGTERM handlers
and performs the graceful shutdown itself.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from broker.config import BrokerConfig, ConfigError, load_config
from broker.logging_setup import configure_logging

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
        return load_config(conf, overrides)
    except ConfigError as exc:
        raise _ConfigProblem(f"configuration error: {exc}") from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="magnetar", prog_name="magnetar")
def main() -> None:
    """Magnetar: a standalone broker speaking the Apache Pulsar binary protocol."""


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
