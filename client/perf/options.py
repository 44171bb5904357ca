"""The settings of one ``magnetar-perf`` run (the CLI builds them; ``bench/`` too)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from protocol.enums import InitialPosition, ProducerAccessMode, SubType


class Dedup(StrEnum):
    """What to do with the topics' deduplication policy before the run."""

    ON = "on"
    OFF = "off"
    KEEP = "keep"  # leave the broker's / namespace's setting alone


ACCESS_MODES: dict[str, ProducerAccessMode] = {mode.name: mode for mode in ProducerAccessMode}
SUBSCRIPTION_TYPES: dict[str, SubType] = {kind.name: kind for kind in SubType}
INITIAL_POSITIONS: dict[str, InitialPosition] = {where.name: where for where in InitialPosition}


@dataclass(frozen=True, slots=True)
class PerfOptions:
    """One run.

    Attributes:
        url: the broker's binary service URL (``pulsar://host:port``).
        admin_url: the broker's HTTP URL, needed only when ``dedup`` is not ``keep``.
        topics: full or short topic names; producers/consumers are spread over all of them.
        producers: producers per topic.
        rate: total messages per second over all producers, 0 = as fast as possible.
        size: payload bytes per message.
        batch_messages: messages per batch entry, 1 = batching off.
        batch_delay_ms: the client mode's batching delay.
        dedup: the topics' dedup policy to set first (admin REST).
        access_mode: the producers' access mode (PIP-68).
        duration: seconds to run (0 = until ``count``).
        count: messages to send / receive (0 = until ``duration``).
        raw: the raw pipelined generator instead of our client.
        window: entries in flight per connection (raw) / pending messages per producer (client).
        subscription, subscription_type, initial_position: the consumer's (``consume``,
            ``e2e``).
        progress_interval: seconds between progress lines, 0 = no live progress.
        producer_name_prefix: producer names are ``<prefix>-<n>`` (fixed names keep dedup
            state across runs); None = a fresh random prefix per run.
    """

    url: str
    topics: tuple[str, ...]
    admin_url: str | None = None
    producers: int = 1
    rate: float = 0.0
    size: int = 100
    batch_messages: int = 1
    batch_delay_ms: int = 1
    dedup: Dedup = Dedup.KEEP
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    duration: float = 0.0
    count: int = 0
    raw: bool = False
    window: int = 1000
    subscription: str = "magnetar-perf"
    subscription_type: SubType = SubType.Exclusive
    initial_position: InitialPosition = InitialPosition.Latest
    progress_interval: float = 1.0
    producer_name_prefix: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if not self.topics:
            problems.append("at least one topic")
        if self.producers < 1:
            problems.append("producers >= 1")
        if self.rate < 0:
            problems.append("rate >= 0")
        if self.size < 0:
            problems.append("size >= 0")
        if self.batch_messages < 1:
            problems.append("batch messages >= 1")
        if self.window < 1:
            problems.append("window >= 1")
        if self.duration < 0 or self.count < 0:
            problems.append("duration and count >= 0")
        if self.duration == 0 and self.count == 0:
            problems.append("a duration or a count")
        if self.dedup is not Dedup.KEEP and not self.admin_url:
            problems.append("an admin URL to set the dedup policy")
        if problems:
            raise ValueError("magnetar-perf needs " + ", ".join(problems))

    @property
    def batching(self) -> bool:
        return self.batch_messages > 1

    def summary(self) -> dict[str, object]:
        """The settings as they appear in the JSON summary."""
        return {
            "url": self.url,
            "topics": list(self.topics),
            "producers_per_topic": self.producers,
            "rate": self.rate,
            "size": self.size,
            "batch_messages": self.batch_messages,
            "dedup": self.dedup.value,
            "access_mode": self.access_mode.name,
            "duration": self.duration,
            "count": self.count,
            "raw": self.raw,
            "window": self.window,
        }
