"""Logging for the broker process: one stdlib configuration, plus a rate limiter.

`configure_logging` installs a single stream handler on the root logger; calling it again
replaces that handler instead of stacking another, so tests and the CLI can call it freely.

`RateLimitedLog` exists because some log lines are triggered by peers: a misbehaving client
that sends a malformed frame per millisecond must not be able to flood the broker log or fill
the disk. It lets a few lines per key through per interval and counts the rest, reporting the
count with the next line that gets through. It is not thread-safe; use it from the event-loop
thread (which is where connection code runs).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["LOG_FORMAT", "RateLimitedLog", "configure_logging"]

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class _BrokerHandler(logging.StreamHandler[TextIO]):
    """Marks the handler `configure_logging` owns, so a second call can find and replace it."""


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    """Send log records at `level` and above to `stream` (stderr by default).

    Args:
        level: a logging level name, e.g. `config.log_level` ("DEBUG", "INFO", ...).
        stream: where to write; stderr keeps stdout free for command output.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _BrokerHandler)]:
        root.removeHandler(handler)
        handler.close()
    handler = _BrokerHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)


@dataclass(slots=True)
class _Window:
    started: float
    emitted: int = 0
    suppressed: int = 0


class RateLimitedLog:
    """Log at most `limit` records per `interval` seconds for each key.

    Keys group similar messages ("malformed frame" per peer address, say). When a window ends
    with records suppressed, the first record of a later window says how many were dropped.
    At most `max_keys` windows are remembered; beyond that the oldest are forgotten, so a flood
    of distinct keys costs bounded memory (and, at worst, lets a few extra lines through).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        limit: int = 5,
        interval: float = 60.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or interval <= 0 or max_keys < 1:
            raise ValueError("limit and max_keys must be >= 1 and interval > 0")
        self._logger = logger
        self._limit = limit
        self._interval = interval
        self._max_keys = max_keys
        self._clock = clock
        self._windows: dict[Hashable, _Window] = {}
        self.suppressed_total = 0
        """Records dropped since creation, across keys (for metrics)."""

    def log(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        """Log `msg % args` at `level` unless `key` is over its budget; True if logged."""
        if not self._logger.isEnabledFor(level):
            return False
        now = self._clock()
        window = self._window(key, now)
        if window.emitted >= self._limit:
            window.suppressed += 1
            self.suppressed_total += 1
            return False
        window.emitted += 1
        self._logger.log(level, msg, *args)
        return True

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        """`log(logging.WARNING, ...)`."""
        return self.log(logging.WARNING, key, msg, *args)

    def _window(self, key: Hashable, now: float) -> _Window:
        window = self._windows.get(key)
        if window is not None and now - window.started < self._interval:
            return window
        if window is not None:
            del self._windows[key]  # re-inserted below, so dict order stays oldest-first
            if window.suppressed:
                self._logger.log(
                    logging.WARNING,
                    "%d similar log messages (%r) suppressed in the last %.0f s",
                    window.suppressed,
                    key,
                    now - window.started,
                )
        elif len(self._windows) >= self._max_keys:
            del self._windows[next(iter(self._windows))]
        fresh = _Window(started=now)
        self._windows[key] = fresh
        return fresh
