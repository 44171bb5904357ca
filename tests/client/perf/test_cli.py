"""magnetar-perf: argument parsing, the JSON summary, and each mode against a real broker.

Correctness only (counts, receipts matching sends, what the broker stored), never speed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from client.perf.cli import build_options, main, produce
from client.perf.options import Dedup, PerfOptions
from client.perf.report import Progress, Recorder, decode_histogram, summary
from protocol.enums import ProducerAccessMode
from tests.helpers import BrokerThread, topic_stats


def parse(*args: str) -> PerfOptions:
    context = produce.make_context("produce", list(args))
    return build_options(context.params)


def run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_options_are_parsed() -> None:
    options = parse(
        "t", "-t", "3", "-n", "2", "-r", "500", "-s", "64", "-b", "10", "--dedup", "off",
        "--admin-url", "http://h:8080", "--access-mode", "Exclusive", "-d", "5", "--raw",
    )  # fmt: skip
    assert options.topics == ("t-0", "t-1", "t-2")
    assert (options.producers, options.rate, options.size) == (2, 500, 64)
    assert (options.batch_messages, options.batching, options.raw) == (10, True, True)
    assert options.dedup is Dedup.OFF
    assert options.access_mode is ProducerAccessMode.Exclusive
    assert (options.duration, options.count) == (5, 0)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["t"], "a duration or a count"),
        (["t", "-m", "10", "--dedup", "on"], "an admin URL"),
        (["t", "-m", "10", "-b", "0"], "batch messages >= 1"),
    ],
)
def test_invalid_options_are_refused(args: list[str], problem: str) -> None:
    result = CliRunner().invoke(main, ["produce", *args])
    assert result.exit_code == 2
    assert problem in result.output


def test_summary_has_rates_percentiles_and_the_histogram() -> None:
    recorder = Recorder()
    for micros in range(1, 1001):
        recorder.record_latency(micros / 1e6)
    recorder.messages, recorder.entries, recorder.payload_bytes = 1000, 10, 100_000
    recorder.started, recorder.finished = 10.0, 12.0
    result = summary("produce", recorder, {"size": 100}, extra_field=1)
    json.dumps(result)  # serialisable
    assert (result["msgs_per_s"], result["entries_per_s"], result["mb_per_s"]) == (500, 5, 0.05)
    latency = result["latency_us"]
    assert latency["count"] == 1000
    assert latency["p50"] == pytest.approx(500, rel=0.01)
    assert latency["p99"] == pytest.approx(990, rel=0.01)
    assert latency["max"] == pytest.approx(1000, rel=0.01)
    assert decode_histogram(result["histogram_hdr"]).get_total_count() == 1000
    assert result["extra_field"] == 1


def test_progress_line_shows_rates_and_percentiles() -> None:
    recorder = Recorder()
    progress = Progress("produce", recorder, Console(file=io.StringIO()))
    recorder.messages, recorder.payload_bytes = 5000, 500_000
    recorder.record_latency(0.002, 5000)
    line = progress.line()
    assert line.startswith("produce: 5,000 msgs")
    assert "msg/s" in line
    assert "MB/s" in line
    assert "p99 2.00" in line


def stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    return topic_stats(broker.http, f"persistent://public/default/{topic}")


def stored(broker: BrokerThread, topic: str) -> int:
    count: int = stats(broker, topic)["msgInCounter"]
    return count


@pytest.mark.integration
def test_raw_mode_every_send_gets_its_receipt(broker: BrokerThread, tmp_path: Path) -> None:
    png = tmp_path / "latency.png"
    result = run(
        "produce", "perf-raw", "-u", broker.url, "--admin-url", broker.http, "--dedup", "on",
        "--raw", "-m", "3000", "-n", "2", "-w", "200", "-q", "--plot", str(png),
    )  # fmt: skip
    assert (result["messages"], result["entries"], result["sent_messages"]) == (3000, 3000, 3000)
    assert (result["mismatched_receipts"], result["duplicates"], result["errors"]) == (0, 0, 0)
    assert result["receipts_fast_path"] == 3000
    assert result["latency_us"]["count"] == 3000
    assert stored(broker, "perf-raw") == 3000
    assert stats(broker, "perf-raw")["deduplicationStatus"] == "Enabled"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
def test_raw_mode_batches_and_rate(broker: BrokerThread) -> None:
    result = run(
        "produce", "perf-raw-batch", "-u", broker.url, "--raw", "-m", "2000", "-b", "100",
        "-r", "20000", "-q",
    )  # fmt: skip
    assert (result["messages"], result["entries"]) == (2000, 20)
    assert (result["mismatched_receipts"], result["errors"]) == (0, 0)
    assert stored(broker, "perf-raw-batch") == 2000


@pytest.mark.integration
def test_client_mode_produces_then_consumes(broker: BrokerThread) -> None:
    result = run(
        "produce", "perf-client", "-u", broker.url, "-m", "2000", "-b", "50", "-q",
        "--dedup", "off", "--admin-url", broker.http,
    )  # fmt: skip
    assert (result["messages"], result["errors"]) == (2000, 0)
    assert result["latency_us"]["count"] == 2000
    assert stored(broker, "perf-client") == 2000
    assert stats(broker, "perf-client")["deduplicationStatus"] == "Disabled"
    consumed = run(
        "consume", "perf-client", "-u", broker.url, "-m", "2000", "-d", "30", "-q",
        "--initial-position", "Earliest",
    )  # fmt: skip
    assert (consumed["messages"], consumed["bytes"], consumed["errors"]) == (2000, 200_000, 0)


@pytest.mark.integration
@pytest.mark.parametrize("raw", [False, True])
def test_e2e_receives_everything_that_was_acknowledged(broker: BrokerThread, raw: bool) -> None:
    args = ["e2e", "perf-e2e", "-u", broker.url, "-m", "1500", "-q"] + (["--raw"] if raw else [])
    result = run(*args)
    assert result["produce"]["messages"] == 1500
    assert result["produce"]["mismatched_receipts"] == 0
    assert (result["messages"], result["errors"]) == (1500, 0)
    assert result["latency_us"]["count"] == 1500


@pytest.mark.integration
def test_raw_consumer_catches_up_on_batches(broker: BrokerThread) -> None:
    produced = run(
        "produce", "perf-catch-up", "-u", broker.url, "--raw", "-m", "3000", "-b", "100", "-q"
    )
    assert produced["messages"] == 3000
    result = run(
        "consume", "perf-catch-up", "-u", broker.url, "--raw", "-m", "3000", "-d", "30",
        "-w", "500", "--initial-position", "Earliest", "-q",
    )  # fmt: skip
    assert (result["messages"], result["entries"], result["errors"]) == (3000, 30, 0)
    assert result["bytes"] >= 3000 * 100  # payloads plus the per-message batch headers


@pytest.mark.integration
def test_raw_mode_continues_after_a_named_producers_last_sequence_id(broker: BrokerThread) -> None:
    args = ["produce", "perf-named", "-u", broker.url, "--raw", "-m", "500", "-q"]
    first = run(*args, "--producer-name", "fixed")
    second = run(*args, "--producer-name", "fixed")  # dedup knows "fixed-0" already
    for result in (first, second):
        assert (result["messages"], result["duplicates"], result["mismatched_receipts"]) == (
            500,
            0,
            0,
        )
    assert stored(broker, "perf-named") == 1000
