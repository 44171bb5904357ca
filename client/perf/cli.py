"""``magnetar-perf produce|consume|e2e``: the command line (click), like ``pulsar-perf``.

Progress lines go to stderr; the final JSON summary is the only thing on stdout (and, with
``--json PATH``, in that file), so scripts can ``json.loads`` it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import click
import uvloop

from client.perf import policies
from client.perf.client_mode import run_client_consume, run_client_produce, run_e2e
from client.perf.options import (
    ACCESS_MODES,
    INITIAL_POSITIONS,
    SUBSCRIPTION_TYPES,
    Dedup,
    PerfOptions,
)
from client.perf.raw import run_raw_produce
from client.perf.raw_consume import run_raw_consume
from client.perf.report import Progress, Recorder, summary

Runner = Callable[[PerfOptions, Recorder], Awaitable[dict[str, Any]]]


def _topics(base: tuple[str, ...], num_topics: int) -> tuple[str, ...]:
    """``-t 3 my-topic`` gives my-topic-0 .. my-topic-2 (pulsar-perf's ``--num-topic``)."""
    if num_topics <= 1:
        return base
    return tuple(f"{topic}-{i}" for topic in base for i in range(num_topics))


def common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    decorators = [
        click.argument("topics", nargs=-1, required=True),
        click.option("--url", "-u", default="pulsar://127.0.0.1:6650", show_default=True),
        click.option("--admin-url", default=None, help="HTTP admin URL (for --dedup on/off)."),
        click.option("--num-topics", "-t", default=1, show_default=True, help="Topics per name."),
        click.option("--rate", "-r", default=0.0, show_default=True, help="msgs/s, 0 = max."),
        click.option("--size", "-s", default=100, show_default=True, help="Payload bytes."),
        click.option("--duration", "-d", default=0.0, help="Seconds to run."),
        click.option("--count", "-m", default=0, help="Messages to send / receive."),
        click.option("--window", "-w", default=1000, show_default=True, help="In flight."),
        click.option(
            "--json",
            "json_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Also write the JSON summary here.",
        ),
        click.option(
            "--plot",
            "plot_path",
            type=click.Path(path_type=Path),
            default=None,
            help="PNG of the latency percentiles (needs the 'plot' extra: matplotlib).",
        ),
        click.option("--quiet", "-q", is_flag=True, help="No progress lines."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def producer_options(command: Callable[..., Any]) -> Callable[..., Any]:
    decorators = [
        click.option("--producers", "-n", default=1, show_default=True, help="Per topic."),
        click.option("--batch", "-b", default=1, show_default=True, help="Msgs per batch."),
        click.option("--batch-delay-ms", default=1, show_default=True),
        click.option("--dedup", type=click.Choice([d.value for d in Dedup]), default="keep"),
        click.option("--access-mode", type=click.Choice(list(ACCESS_MODES)), default="Shared"),
        click.option("--raw", is_flag=True, help="Raw pipelined generator (pre-encoded SENDs)."),
        click.option("--producer-name", default=None, help="Producer name prefix."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def consumer_options(command: Callable[..., Any]) -> Callable[..., Any]:
    decorators = [
        click.option("--subscription", "-S", default="magnetar-perf", show_default=True),
        click.option(
            "--subscription-type", type=click.Choice(list(SUBSCRIPTION_TYPES)), default="Exclusive"
        ),
        click.option(
            "--initial-position", type=click.Choice(list(INITIAL_POSITIONS)), default="Latest"
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def build_options(params: dict[str, Any]) -> PerfOptions:
    """``PerfOptions`` from the parsed CLI parameters (raises ``click.BadParameter``)."""
    try:
        return PerfOptions(
            url=params["url"],
            admin_url=params["admin_url"],
            topics=_topics(tuple(params["topics"]), params["num_topics"]),
            producers=params.get("producers", 1),
            rate=params["rate"],
            size=params["size"],
            batch_messages=params.get("batch", 1),
            batch_delay_ms=params.get("batch_delay_ms", 1),
            dedup=Dedup(params.get("dedup", "keep")),
            access_mode=ACCESS_MODES[params.get("access_mode", "Shared")],
            duration=params["duration"],
            count=params["count"],
            raw=params.get("raw", False),
            window=params["window"],
            subscription=params.get("subscription", "magnetar-perf"),
            subscription_type=SUBSCRIPTION_TYPES[params.get("subscription_type", "Exclusive")],
            initial_position=INITIAL_POSITIONS[params.get("initial_position", "Latest")],
            progress_interval=0.0 if params["quiet"] else 1.0,
            producer_name_prefix=params.get("producer_name"),
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def apply_dedup(options: PerfOptions) -> None:
    if options.dedup is not Dedup.KEEP:
        assert options.admin_url is not None
        policies.set_dedup(options.admin_url, options.topics, options.dedup is Dedup.ON)


@contextlib.contextmanager
def _progress(recorders: dict[str, Recorder], interval: float) -> Iterator[None]:
    """Print a progress line per recorder every ``interval`` seconds while the run lasts."""
    if not interval:
        yield
        return
    lines = [Progress(kind, recorder) for kind, recorder in recorders.items()]
    loop = asyncio.get_running_loop()
    handle: list[asyncio.TimerHandle] = []

    def tick() -> None:
        for progress in lines:
            progress.show()
        handle[:] = [loop.call_later(interval, tick)]

    handle.append(loop.call_later(interval, tick))
    try:
        yield
    finally:
        handle[0].cancel()


async def produce_run(options: PerfOptions) -> dict[str, Any]:
    await asyncio.to_thread(apply_dedup, options)
    recorder = Recorder()
    runner: Runner = run_raw_produce if options.raw else run_client_produce
    with _progress({"produce": recorder}, options.progress_interval):
        extra = await runner(options, recorder)
    return summary("produce", recorder, options.summary(), **extra)


async def consume_run(options: PerfOptions) -> dict[str, Any]:
    recorder = Recorder()
    runner: Runner = run_raw_consume if options.raw else run_client_consume
    with _progress({"consume": recorder}, options.progress_interval):
        extra = await runner(options, recorder)
    return summary("consume", recorder, options.summary(), **extra)


async def e2e_run(options: PerfOptions) -> dict[str, Any]:
    await asyncio.to_thread(apply_dedup, options)
    produced, received = Recorder(), Recorder()
    runner: Runner = run_raw_produce if options.raw else run_client_produce
    with _progress({"produce": produced, "e2e": received}, options.progress_interval):
        extra = await run_e2e(options, produced, received, runner)
    result = summary("e2e", received, options.summary())
    result["produce"] = summary("produce", produced, options.summary(), **extra["produce"])
    return result


def _finish(result: dict[str, Any], json_path: Path | None, plot_path: Path | None) -> None:
    text = json.dumps(result, indent=2)
    if json_path is not None:
        json_path.write_text(text + "\n")
    if plot_path is not None:
        from client.perf.plot import plot_histograms
        from client.perf.report import decode_histogram

        histograms = {result["kind"]: decode_histogram(result["histogram_hdr"])}
        if "produce" in result:
            histograms["publish"] = decode_histogram(result["produce"]["histogram_hdr"])
        plot_histograms(histograms, plot_path, f"magnetar-perf {result['kind']}")
    click.echo(text)
    if result["errors"] or result.get("mismatched_receipts"):
        sys.exit(1)


def _run(coroutine: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await coroutine

    return uvloop.run(main())


@click.group()
def main() -> None:
    """Load generator for Pulsar-protocol brokers (Magnetar, Apache Pulsar)."""


@main.command()
@common_options
@producer_options
def produce(**params: Any) -> None:
    """Publish to TOPICS and report throughput and publish latency."""
    options = build_options(params)
    _finish(_run(produce_run(options)), params["json_path"], params["plot_path"])


@main.command()
@common_options
@consumer_options
@click.option("--raw", is_flag=True, help="Raw consumer: entries counted, batches never split.")
def consume(**params: Any) -> None:
    """Consume from TOPICS and report throughput and end-to-end latency."""
    options = build_options(params)
    _finish(_run(consume_run(options)), params["json_path"], params["plot_path"])


@main.command()
@common_options
@producer_options
@consumer_options
def e2e(**params: Any) -> None:
    """Produce and consume TOPICS at once: publish and end-to-end latency."""
    options = build_options(params)
    _finish(_run(e2e_run(options)), params["json_path"], params["plot_path"])
