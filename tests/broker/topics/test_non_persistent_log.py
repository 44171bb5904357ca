"""``MemoryLog`` stands in for ``Ledger`` under a non-persistent topic: every ledger method the
topic and its helpers call must exist on it (a new one added to the persistent path only would
otherwise fail there at runtime, as ``append_many`` once did)."""

from __future__ import annotations

import re
from pathlib import Path

from broker.storage import Position
from broker.topics.non_persistent import MemoryLog

BROKER = Path(__file__).resolve().parents[3] / "broker"
USERS = (
    "topics/topic.py",
    "topics/positions.py",
    "publish/publisher.py",
    "dispatch/subscription.py",
    "dispatch/entry_loader.py",
    "compaction/reads.py",
)
# Durable cursors (the dedup snapshot, durable subscriptions): a non-persistent topic never
# reaches them (NonPersistentTopic overrides get_or_create_subscription and set_dedup_enabled).
DURABLE_ONLY = {"add_cursor", "new_cursor", "open_cursor"}


def test_memory_log_offers_every_ledger_member_the_topic_uses() -> None:
    used: set[str] = set()
    for name in USERS:
        used |= set(re.findall(r"\b_?ledger\.([A-Za-z_]\w*)", (BROKER / name).read_text()))
    assert "append_many" in used  # the scan sees the publish path
    missing = sorted(n for n in used - DURABLE_ONLY if not hasattr(MemoryLog, n))
    assert missing == []


def test_append_many_appends_in_order() -> None:
    log = MemoryLog(capacity=3)
    assert log.append_many([b"a", b"b"]) == [Position(0, 0), Position(0, 1)]
    assert log.append_many([b"c", b"d"]) == [Position(0, 2), Position(0, 3)]
    # At capacity the oldest go (at most once): the newest three remain.
    assert [data for _, data in log.read(Position(-1, -1), 10)] == [b"b", b"c", b"d"]
