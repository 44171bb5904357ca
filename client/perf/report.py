"""Counting a run: the HDR latency histogram, live progress lines and the JSON summary.

Latencies are recorded in microseconds into an ``hdrh`` histogram (HdrHistogram's Python port:
3 significant digits, 1 us to 10 min). ``record_value`` costs ~2 us in Python, so the generators
record one value per *group* of messages that share a send and a receive instant, with the
group's size as the count: exact, and cheap at hundreds of thousands of messages per second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram
from rich.console import Console

LOWEST_US = 1
HIGHEST_US = 600_000_000
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


@dataclass
class Recorder:
    """What a run counts; the generators update the fields directly (hot path)."""

    histogram: HdrHistogram = field(default_factory=new_histogram)
    messages: int = 0  # acknowledged (produce) or received (consume)
    entries: int = 0
    payload_bytes: int = 0
    sent_messages: int = 0
    duplicates: int = 0  # entries acknowledged as PIP-6 duplicates (-1, -1)
    errors: int = 0
    mismatched_receipts: int = 0  # a receipt whose sequence id was not the expected next one
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None

    def record_latency(self, seconds: float, count: int = 1) -> None:
        micros = int(seconds * 1e6)
        self.histogram.record_value(min(max(micros, LOWEST_US), HIGHEST_US), count)

    def finish(self) -> None:
        self.finished = time.perf_counter()

    @property
    def elapsed(self) -> float:
        end = time.perf_counter() if self.finished is None else self.finished
        return max(end - self.started, 1e-9)

    def latency_summary(self) -> dict[str, float]:
        histogram = self.histogram
        if histogram.get_total_count() == 0:
            return {"count": 0}
        summary: dict[str, float] = {"count": histogram.get_total_count()}
        for percentile in PERCENTILES:
            summary[f"p{percentile:g}"] = histogram.get_value_at_percentile(percentile)
        summary["mean"] = round(histogram.get_mean_value(), 1)
        summary["max"] = histogram.get_max_value()
        return summary


def summary(
    kind: str, recorder: Recorder, settings: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """The JSON summary of a finished run (``latency_us`` in microseconds)."""
    seconds = recorder.elapsed
    return {
        "kind": kind,
        "settings": settings,
        "seconds": round(seconds, 3),
        "messages": recorder.messages,
        "sent_messages": recorder.sent_messages,
        "entries": recorder.entries,
        "bytes": recorder.payload_bytes,
        "msgs_per_s": round(recorder.messages / seconds, 1),
        "entries_per_s": round(recorder.entries / seconds, 1),
        "mb_per_s": round(recorder.payload_bytes / seconds / 1e6, 3),
        "duplicates": recorder.duplicates,
        "errors": recorder.errors,
        "mismatched_receipts": recorder.mismatched_receipts,
        "latency_us": recorder.latency_summary(),
        "histogram_hdr": recorder.histogram.encode().decode()  # HdrHistogram's base64 form
        if recorder.histogram.get_total_count()
        else "",
        **extra,
    }


def decode_histogram(encoded: str) -> HdrHistogram:
    """The histogram of a summary's ``histogram_hdr`` (for plotting a saved summary)."""
    return HdrHistogram.decode(encoded)


class Progress:
    """One line per interval on stderr: rates over the interval, latency so far."""

    def __init__(self, kind: str, recorder: Recorder, console: Console | None = None) -> None:
        self.kind = kind
        self.recorder = recorder
        self.console = console or Console(stderr=True)
        self._last = (time.perf_counter(), 0, 0)

    def line(self) -> str:
        now = time.perf_counter()
        recorder = self.recorder
        then, messages, payload = self._last
        self._last = (now, recorder.messages, recorder.payload_bytes)
        span = max(now - then, 1e-9)
        latency = recorder.latency_summary()
        percentiles = " ".join(
            f"p{p:g} {latency[f'p{p:g}'] / 1000:.2f}"
            for p in (50.0, 99.0, 99.9)
            if latency["count"]
        )
        return (
            f"{self.kind}: {recorder.messages:,} msgs  "
            f"{(recorder.messages - messages) / span:,.0f} msg/s  "
            f"{(recorder.payload_bytes - payload) / span / 1e6:,.2f} MB/s  "
            f"latency ms {percentiles or '-'}"
        )

    def show(self) -> None:
        self.console.print(self.line(), highlight=False)
