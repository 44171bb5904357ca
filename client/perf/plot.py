"""A PNG of a latency histogram: HdrHistogram's percentile-distribution chart.

The x axis is ``1 / (1 - percentile)`` on a log scale (so 90%, 99%, 99.9% ... are evenly
spaced, as in HdrHistogram's own plotter), the y axis the latency in milliseconds (log scale). Needs
matplotlib (the ``plot`` extra, installed by ``make install``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hdrh.histogram import HdrHistogram

_TICKS = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)


def percentile_curve(histogram: HdrHistogram) -> tuple[list[float], list[float]]:
    """(percentile, latency in ms) points, from the histogram's percentile iterator."""
    percentiles: list[float] = []
    latencies: list[float] = []
    for item in histogram.get_percentile_iterator(5):
        percentile = min(item.percentile_level_iterated_to, 99.9999)
        percentiles.append(percentile)
        latencies.append(item.value_iterated_to / 1000)
    return percentiles, latencies


def plot_histograms(histograms: Mapping[str, HdrHistogram], path: Path, title: str) -> None:
    """Write a PNG with one percentile curve per named histogram (latencies in us)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    try:
        for label, histogram in histograms.items():
            if histogram.get_total_count() == 0:
                continue
            percentiles, latencies = percentile_curve(histogram)
            axes.plot([1 / (1 - p / 100) for p in percentiles], latencies, label=label)
        axes.set_xscale("log")
        axes.set_yscale("log")  # medians of a few ms and stalls of 100+ ms on one chart
        axes.set_xticks([1 / (1 - p / 100) for p in _TICKS])
        axes.set_xticklabels([f"{p:g}%" for p in _TICKS])
        axes.set_xlabel("percentile")
        axes.set_ylabel("latency (ms)")
        axes.set_title(title)
        axes.grid(True, which="major", alpha=0.4)
        if len(histograms) > 1:
            axes.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
