"""Exponential backoff between reconnection and retry attempts (the C++ client's ``Backoff``).

The first delay is ``initial``; each next one doubles, up to ``maximum``. A random part of up to
10 % is taken off each delay so that many clients cut off by the same broker restart do not
come back in lockstep.
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays (seconds) for successive attempts; ``reset()`` after a success."""

    __slots__ = ("_initial", "_maximum", "_next", "_random")

    def __init__(self, initial: float, maximum: float, *, rng: random.Random | None = None) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"bad backoff bounds {initial}..{maximum}")
        self._initial = initial
        self._maximum = maximum
        self._next = initial
        self._random = rng or random.Random()

    def next(self) -> float:
        """The delay before the next attempt."""
        current = self._next
        self._next = min(current * 2, self._maximum)
        return current - current * 0.1 * self._random.random()

    def reset(self) -> None:
        self._next = self._initial
