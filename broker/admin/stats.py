"""The JSON of ``stats``, ``partitioned-stats`` and ``internal-stats``, with Pulsar's field names.

``topic_stats`` follows ``TopicStatsImpl`` (``PublisherStatsImpl``, ``SubscriptionStatsImpl``,
``ConsumerStatsImpl``): counters in messages, rates per second over the topic's rate window,
``storageSize`` in bytes, publishers with name, access mode and topic epoch, subscriptions with
backlog (entries, as Pulsar's ``msgBacklog``), consumers and unacked messages, plus the
deduplication state (``deduplicationStatus`` as Pulsar, and Magnetar's ``deduplication`` detail).
Magnetar extras keep their names (``producerAccess``, ``unreadableEntries``, ...).

``internal_stats`` follows ``PersistentTopicInternalStats``: one "ledger" per segment, cursors
with mark-delete, read position and individually deleted ranges in Pulsar's notation
(``[(3:4..3:6]]``: open below, closed above), and the topic's ledger properties.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.storage import Position

if TYPE_CHECKING:
    from broker.dispatch.subscription import Subscription
    from broker.publish.producers import Producer
    from broker.storage import Cursor
    from broker.topics.topic import Topic

_SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
    "backlogSize",
)


def _position(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def _publisher(producer: Producer, topic_epoch: int | None) -> dict[str, Any]:
    return {
        "producerId": producer.producer_id,
        "producerName": producer.name,
        "accessMode": producer.mode.name,
        "topicEpoch": producer.topic_epoch if producer.topic_epoch is not None else topic_epoch,
        "msgInCounter": producer.msg_in,
        "isFenced": producer.fenced,
        "metadata": {},
    }


def _subscription(sub: Subscription) -> dict[str, Any]:
    described = sub.describe()
    active = sub.active_consumer()
    individually_deleted = sub.cursor.individually_deleted()
    return {
        **described,
        "isDurable": sub.durable,
        "isReplicated": False,
        "activeConsumerName": active.name if active is not None else None,
        "bytesOutCounter": sub.stats.bytes_out,
        "msgBacklogNoDelayed": max(0, sub.backlog() - sub.stats.delayed),
        "nonContiguousDeletedMessagesRanges": len(individually_deleted),
        "consumers": [
            {**consumer, "lastAckedTimestamp": 0, "metadata": {}}
            for consumer in described["consumers"]  # type: ignore[attr-defined]
        ],
    }


def stats_snapshot(topic: Topic) -> dict[str, Any]:
    """The topic's counters, rates and states (the core of ``topic_stats``)."""
    last = topic.last_confirmed_position()
    counters = topic.rate_counters()
    rate_in, throughput_in, rate_out, throughput_out = topic.rates()
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": rate_out,
        "msgThroughputOut": throughput_out,
        "msgInCounter": topic.stats.msg_in,
        "bytesInCounter": topic.stats.bytes_in,
        "msgOutCounter": counters[2],
        "bytesOutCounter": counters[3],
        "storageSize": topic.ledger.stats()["stored_bytes"],
        "publishers": sum(1 for p in topic.producers.producers if p.ready),
        "producerAccess": topic.producers.stats(),
        "lastConfirmedEntry": f"{last[0]}:{last[1]}",
        "unreadableEntries": topic.stats.unreadable_entries,
        "subscriptions": {n: s.describe() for n, s in topic.subscriptions.items()},
        "deduplication": dedup_stats(topic),
        "compaction": topic.compaction.stats_json(),
        "idempotency": None if topic.idempotency is None else topic.idempotency.stats(),
    }


def dedup_stats(topic: Topic) -> dict[str, Any]:
    """The ``deduplication`` section of the topic stats (JSON-ready, camelCase keys)."""
    if topic.dedup is None:
        return {"enabled": False}
    raw = topic.dedup.stats()
    snapshot_position = raw["last_snapshot_position"]
    persisted_position = raw["last_persisted_position"]
    return {
        "enabled": True,
        "state": raw["state"],
        "trackedProducers": raw["tracked_producers"],
        "connectedProducers": raw["connected_producers"],
        "inactiveProducers": raw["inactive_producers"],
        "accepted": raw["accepted"],
        "duplicatesDropped": raw["duplicates_dropped"],
        "unknownAnswers": raw["unknown_answers"],
        "straddlingBatchesStored": raw["straddling_batches"],
        "writeFailures": raw["write_failures"],
        "purgedProducers": raw["purged_producers"],
        "replayedEntries": raw["replayed_entries"],
        "unreadableEntriesSkipped": raw["unreadable_entries_skipped"],
        "chunkedMessagesInFlight": raw["chunked_messages_in_flight"],
        "recoverySeconds": raw["recovery_seconds"],
        "entriesSinceSnapshot": raw["entries_since_snapshot"],
        "lastPersistedPosition": _position_or_none(persisted_position),
        "lastSnapshotPosition": _position_or_none(snapshot_position),
        # Wall-clock seconds since the epoch of the last snapshot taken by this load.
        "lastSnapshotTime": topic.publisher.last_snapshot_wall_time,
    }


def _position_or_none(position: object) -> str | None:
    """``"ledger:entry"`` as Pulsar prints positions, None when there is none."""
    if isinstance(position, Position):
        return f"{position.ledger_id}:{position.entry_id}"
    return None


def topic_stats(topic: Topic) -> dict[str, Any]:
    """``GET .../stats`` of one (non-partitioned or partition) topic."""
    snapshot = stats_snapshot(topic)
    access = snapshot["producerAccess"]
    ready = [p for p in topic.producers.producers if p.ready]
    msg_in = snapshot["msgInCounter"]
    subscriptions = {
        name: _subscription(sub)
        for name, sub in topic.subscriptions.items()
        if name != DEDUP_CURSOR
    }
    return {
        **snapshot,
        "averageMsgSize": snapshot["bytesInCounter"] / msg_in if msg_in else 0.0,
        "backlogSize": _backlog_bytes(topic),
        "publishers": [_publisher(p, access["topicEpoch"]) for p in ready],
        "waitingPublishers": len(access["waitingProducers"]),
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": "Enabled" if topic.dedup_enabled else "Disabled",
        "topicEpoch": access["topicEpoch"],
        "nonContiguousDeletedMessagesRanges": sum(
            s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()
        ),
    }


def _backlog_bytes(topic: Topic) -> int:
    """Bytes not yet consumed by the slowest durable subscription (Pulsar's ``backlogSize``):
    estimated from the stored bytes per entry, as Pulsar estimates it from ledger sizes."""
    stats = topic.ledger.stats()
    entries, stored = stats["stored_entries"], stats["stored_bytes"]
    backlog = max((s.backlog() for s in topic.subscriptions.values() if s.durable), default=0)
    return stored * backlog // entries if entries else 0


def partitioned_stats(
    partitions: int, per_partition: dict[str, dict[str, Any]], *, per_partition_detail: bool
) -> dict[str, Any]:
    """``GET .../partitioned-stats``: sums over the partitions (Pulsar's
    ``PartitionedTopicStatsImpl``), ``metadata.partitions`` and, if asked, each partition's."""
    total: dict[str, Any] = dict.fromkeys(_SUMMED, 0)
    publishers: list[dict[str, Any]] = []
    subscriptions: dict[str, dict[str, Any]] = {}
    for stats in per_partition.values():
        for key in _SUMMED:
            total[key] += stats.get(key, 0)
        publishers.extend(stats["publishers"])
        for name, sub in stats["subscriptions"].items():
            merged = subscriptions.setdefault(
                name,
                {"msgBacklog": 0, "unackedMessages": 0, "msgOutCounter": 0, "consumers": []},
            )
            merged["type"] = sub["type"]
            merged["isDurable"] = sub["isDurable"]
            for key in ("msgBacklog", "unackedMessages", "msgOutCounter"):
                merged[key] += sub[key]
            merged["consumers"].extend(sub["consumers"])
    msg_in = total["msgInCounter"]
    total.update(
        averageMsgSize=total["bytesInCounter"] / msg_in if msg_in else 0.0,
        publishers=publishers,
        subscriptions=subscriptions,
        replication={},
        metadata={"partitions": partitions},
        partitions=per_partition if per_partition_detail else {},
    )
    return total


# ---------------------------------------------------------------------------- internal stats


def deleted_ranges_text(cursor: Cursor) -> str:
    """Individually deleted ranges as Pulsar prints them: ``[(l:a..l:b]]`` means a+1 .. b."""
    ranges = [
        f"({_position(first.previous())}..{_position(last)}]"
        for first, last in cursor.individually_deleted()
    ]
    return "[" + ", ".join(ranges) + "]"


def _cursor(topic: Topic, cursor: Cursor) -> dict[str, Any]:
    sub = topic.subscriptions.get(cursor.name)
    ranges = cursor.individually_deleted()
    return {
        "markDeletePosition": _position(cursor.mark_delete_position),
        # The dispatcher reads ahead of the cursor's own read position: report where it is.
        "readPosition": (
            str(sub.describe()["readPosition"])
            if sub is not None
            else _position(cursor.read_position)
        ),
        "persistedMarkDeletePosition": _position(cursor.persisted_mark_delete_position),
        "individuallyDeletedMessages": deleted_ranges_text(cursor),
        "totalNonContiguousDeletedMessagesRange": len(ranges),
        "messagesConsumedCounter": sub.stats.msg_out if sub is not None else 0,
        "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog(),
        "active": bool(sub is not None and sub.consumers),
        "state": "Open",
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        "properties": cursor.properties,
    }


def internal_stats(topic: Topic) -> dict[str, Any]:
    """``GET .../internalStats`` of one topic (non-partitioned or partition)."""
    ledger = topic.ledger
    segments = ledger.segment_summaries()
    last = topic.last_confirmed_position()
    current = segments[-1] if segments else None
    ledgers = [
        {
            "ledgerId": ledger_id,
            "entries": entries,
            "size": size,
            "offloaded": False,
            "underReplicated": False,
            "timestamp": sealed_at_ms if sealed_at_ms is not None else 0,
        }
        for ledger_id, entries, size, sealed_at_ms in segments
    ]
    return {
        "numberOfEntries": sum(entries for _, entries, _, _ in segments),
        "totalSize": sum(size for _, _, size, _ in segments),
        "currentLedgerEntries": current[1] if current is not None else 0,
        "currentLedgerSize": current[2] if current is not None else 0,
        "lastLedgerCreatedTimestamp": "",
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": ledger.stats()["pending_entries"],
        "lastConfirmedEntry": _position(last),
        "state": "Terminated" if topic.terminated else "LedgerOpened",
        "ledgers": ledgers,
        "cursors": {name: _cursor(topic, c) for name, c in ledger.cursors.items()},
        "properties": dict(ledger.properties),
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False},
    }
