"""What authentication produces (an ``Identity``) and how it fails (``AuthenticationFailure``).

A failure's ``reason`` is for the broker log only: clients get Pulsar's generic
"Failed to authenticate", so a guesser learns nothing about which part was wrong.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["AuthenticationFailure", "Identity"]


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated role; ``expires_at`` (epoch seconds) for credentials that expire."""

    role: str
    method: str
    expires_at: float | None = None

    def expired(self, now: float | None = None) -> bool:
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at


class AuthenticationFailure(Exception):
    """Credentials were missing, malformed, expired or wrong; ``reason`` says which (logs)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
