"""``RateMeter``: per-second rates of growing counters over a sliding window.

Pulsar reports ``msgRateIn``/``msgThroughputIn`` (and ``Out``) as averages over its last stats
period; Magnetar computes the same from counter samples the topic's housekeeping task takes about
once a second, so a rate read (REST stats, a Prometheus scrape) costs nothing on the publish path
and does not depend on how often anybody reads it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

__all__ = ["RATE_WINDOW_SECONDS", "RateMeter"]

# Rates average over this many seconds (less while the meter is younger than that).
RATE_WINDOW_SECONDS = 10.0
# Samples closer together than this are skipped: the window needs only a handful.
_MIN_SAMPLE_INTERVAL_S = 0.5


class RateMeter:
    """Rates of ``len(counters)`` counters; samples via ``sample``, reads via ``rates``.

    A counter that went down (a subscription and its counters were removed) reads as rate 0
    rather than a negative rate.
    """

    def __init__(
        self,
        initial: Sequence[int],
        *,
        window_s: float = RATE_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window_s
        self._clock = clock
        self._samples: deque[tuple[float, tuple[int, ...]]] = deque()
        self._samples.append((clock(), tuple(initial)))

    def sample(self, counters: Sequence[int]) -> None:
        """Remember the counters now; forget samples no longer needed to span the window."""
        now = self._clock()
        if now - self._samples[-1][0] < _MIN_SAMPLE_INTERVAL_S:
            return
        self._samples.append((now, tuple(counters)))
        # Keep exactly one sample at or beyond the window's start, so rates span the window.
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window:
            self._samples.popleft()

    def rates(self, counters: Sequence[int]) -> tuple[float, ...]:
        """Per-second growth of each counter from the oldest kept sample to ``counters``."""
        then, old = self._samples[0]
        elapsed = self._clock() - then
        if elapsed <= 0:
            return tuple(0.0 for _ in counters)
        return tuple(max(0, new - was) / elapsed for new, was in zip(counters, old, strict=True))
