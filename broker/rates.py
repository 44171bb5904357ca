"""``RateMeter``: per-second rates of growing counters over a sliding window.

Pulsar reports ``msgRateIn``/``msgThroughputIn`` (and ``Out``) as averages over its last stats
period; Magnetar computes the same from counter samples the topic's housekeeping task takes about
once a second, so a rate read (REST stats, a Prometheus scrape) costs nothing on the publish path
and does not depend on how often anybody reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cache

__all__ = ["RATE_WINDOW_SECONDS", "RateMeter"]

# Rates average over this many seconds (less while the meter is younger than that).
RATE_WINDOW_SECONDS = 10.0
# Samples closer together than this are skipped: the window needs only a handful.
_MIN_SAMPLE_INTERVAL_S = 0.5


@cache
def _zeros(length: int) -> tuple[int, ...]:
    return (0,) * length


def _counters(values: Sequence[int]) -> tuple[int, ...]:
    """``values`` as a tuple; all-zero counters (every topic's at load, and an idle topic's
    for ever) share one tuple per length (issue #26: 100,000 idle topics)."""
    found = tuple(values)
    return _zeros(len(found)) if not any(found) else found


class RateMeter:
    """Rates of ``len(counters)`` counters; samples via ``sample``, reads via ``rates``.

    A counter that went down (a subscription and its counters were removed) reads as rate 0
    rather than a negative rate.

    Memory: every loaded topic has one, and most topics are idle, so a run of samples with the
    same counters is kept as its first and last sample only (the last one's time moves on): an
    idle topic holds two samples, not a window's worth. Nothing is lost: the counters were
    constant between the two, so the value at the window's start is known exactly (``rates``).
    """

    __slots__ = ("_clock", "_samples", "_window")

    def __init__(
        self,
        initial: Sequence[int],
        *,
        window_s: float = RATE_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window_s
        self._clock = clock
        # (time, counters), oldest first; a plain list: it holds a handful of samples.
        self._samples: list[tuple[float, tuple[int, ...]]] = [(clock(), _counters(initial))]

    def sample(self, counters: Sequence[int]) -> None:
        """Remember the counters now; forget samples no longer needed to span the window."""
        now = self._clock()
        samples = self._samples
        last_time, last = samples[-1]
        if now - last_time < _MIN_SAMPLE_INTERVAL_S:
            return
        values = _counters(counters)
        if values == last and len(samples) > 1 and samples[-2][1] == last:
            samples[-1] = (now, last)  # the middle of a constant run: move its end
        else:
            samples.append((now, last if values == last else values))
        # Keep exactly one sample at or beyond the window's start, so rates span the window.
        while len(samples) > 1 and now - samples[1][0] >= self._window:
            del samples[0]

    def rates(self, counters: Sequence[int]) -> tuple[float, ...]:
        """Per-second growth of each counter from the window's start to ``counters``."""
        now = self._clock()
        samples = self._samples
        then, old = samples[0]
        if len(samples) > 1 and samples[1][1] == old:
            # Constant up to the next sample: the counters at the window's start are ``old``.
            then = max(then, min(samples[1][0], now - self._window))
        elapsed = now - then
        if elapsed <= 0:
            return tuple(0.0 for _ in counters)
        return tuple(max(0, new - was) / elapsed for new, was in zip(counters, old, strict=True))
