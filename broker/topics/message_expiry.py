"""Message TTL: messages older than the topic's TTL count as consumed on every subscription.

Pulsar's ``PersistentMessageExpiryMonitor``: every ``messageExpiryCheckIntervalInMinutes`` the
broker finds, per subscription, the newest entry published more than TTL seconds ago and moves
the subscription's mark-delete there; the data then goes the way of any consumed data
(retention decides when it is trimmed). Readers hold no durable cursor and are not affected.
The admin API's ``expireMessages`` runs the same step on demand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker.blocking import run_blocking
from broker.storage import Position
from broker.topics.policies import TopicPolicies
from protocol.errors import RemoteProtocolError
from protocol.metadata import parse_entry_metadata

if TYPE_CHECKING:
    from broker.dispatch.subscription import Subscription
    from broker.topics.topic import Topic

log = logging.getLogger(__name__)

#: Pulsar checks every 5 minutes by default; a minute keeps expiry closer to the TTL here.
CHECK_INTERVAL_SECONDS = 60.0


async def newest_expired(topic: Topic, age_seconds: float) -> Position | None:
    """The newest entry published more than ``age_seconds`` ago (None: there is none)."""
    cutoff_ms = int((time.time() - age_seconds) * 1000)

    def published_before(entry: bytes) -> bool:
        try:
            return parse_entry_metadata(entry).publish_time < cutoff_ms
        except RemoteProtocolError:
            return False  # unreadable: never expires anything after it

    # A binary search over the log (reads entries): in a disk thread, as seek by time.
    return await run_blocking(topic.ledger.find_newest_matching, published_before)


async def expire_messages(
    topic: Topic, age_seconds: float, subscriptions: list[Subscription] | None = None
) -> int:
    """Mark messages older than ``age_seconds`` consumed on ``subscriptions`` (default: every
    durable one); returns how many subscriptions moved."""
    newest = await newest_expired(topic, age_seconds)
    if newest is None or topic.closed:
        return 0
    targets = subscriptions if subscriptions is not None else list(topic.subscriptions.values())
    moved = 0
    for sub in targets:
        if sub.durable and not sub.closed and sub.cursor.mark_delete_position < newest:
            sub.skip_through(newest)
            moved += 1
    return moved


async def expire_all(topics: Mapping[str, Topic], policies: TopicPolicies) -> int:
    """One expiry pass over every loaded topic (of the registry ``topics``) that has a TTL."""
    moved = 0
    for topic in list(topics.values()):
        ttl = policies.message_ttl_seconds(topic.name)
        if ttl > 0 and not topic.closed:
            try:
                moved += await expire_messages(topic, ttl)
            except Exception:
                log.exception("%s: message expiry failed", topic.name.full_name)
    return moved


async def run_message_expiry(
    topics: Mapping[str, Topic], policies: TopicPolicies, interval: float = CHECK_INTERVAL_SECONDS
) -> None:
    """Expire messages every ``interval`` seconds until cancelled (broker lifetime)."""
    while True:
        await asyncio.sleep(interval)
        await expire_all(topics, policies)
