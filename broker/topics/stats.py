"""``TopicStats``: what a topic counts as it publishes and reads (the admin API's ``stats`` and
``/metrics`` read them; ``broker/admin/stats.py`` turns a topic into Pulsar's JSON).

Every loaded topic has one, so it has slots (no per-instance ``__dict__``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.storage.buckets import LATENCY_MS_BOUNDS, Buckets


@dataclass(slots=True)
class TopicStats:
    # Messages as Pulsar counts them: a batch entry adds its num_messages, a chunk adds 1.
    msg_in: int = 0
    bytes_in: int = 0
    # Milliseconds from accepting a SEND to its entry being durable (Pulsar's storage write
    # latency, pulsar_storage_write_latency_le_*).
    publish_latency_ms: Buckets = field(default_factory=lambda: Buckets(LATENCY_MS_BOUNDS))
    persistence_errors: int = 0
    flushes: int = 0
    unreadable_entries: int = 0
