"""How the stored namespace and topic policies take effect on topics.

Resolution is Pulsar's: a topic policy wins over its namespace's, which wins over ``broker.toml``.
Partitions share the policies of their partitioned topic (Pulsar keys topic policies by the
partitioned name), so a partition looks up its partitioned topic's policy first.

* Retention: the topic's ledger trims with the effective ``retentionTimeInMinutes`` /
  ``retentionSizeInMB`` (set on load and again whenever a policy changes).
* ``allowAutoTopicCreation``: decides whether a PRODUCER/SUBSCRIBE may create a missing topic.
  Partitions of a partitioned topic (index below its count) are always creatable: Pulsar
  creates them with the partitioned topic. The bare name of a partitioned topic, and a
  partition index beyond its count, never are.
* Message TTL: ``broker/topics/message_expiry.py`` reads ``message_ttl_seconds``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from broker.metadata.stores import AUTO_TOPIC_CREATION, MESSAGE_TTL, RETENTION
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from broker.server import BrokerService
    from broker.topics.topic import Topic


def _effective(service: BrokerService, name: TopicName, key: str) -> Any:
    policies = service.policies
    value = policies.topic_policy(name.full_name, key)
    if value is None and name.is_partition:
        value = policies.topic_policy(name.partitioned_topic_name, key)
    if value is None:
        value = policies.namespace_policy(name.namespace_name, key)
    return value


def retention_of(service: BrokerService, name: TopicName) -> tuple[int, int]:
    """(minutes, MB) of the effective retention policy; -1 = unlimited, as in Pulsar."""
    policy = _effective(service, name, RETENTION)
    if policy is None:
        config = service.config
        return config.default_retention_time_in_minutes, config.default_retention_size_in_mb
    return int(policy["retentionTimeInMinutes"]), int(policy["retentionSizeInMB"])


def apply_retention(service: BrokerService, topic: Topic) -> None:
    """Make the topic's ledger trim with its effective retention (from the next trim on)."""
    minutes, megabytes = retention_of(service, topic.name)
    ledger = topic.ledger
    if (ledger.config.retention_time_minutes, ledger.config.retention_size_mb) != (
        minutes,
        megabytes,
    ):
        ledger.config = dataclasses.replace(
            ledger.config, retention_time_minutes=minutes, retention_size_mb=megabytes
        )


def message_ttl_seconds(service: BrokerService, name: TopicName) -> int:
    """The effective message TTL in seconds, 0 when messages never expire."""
    value = _effective(service, name, MESSAGE_TTL)
    return int(value) if value is not None else 0


def auto_topic_creation_allowed(service: BrokerService, name: TopicName) -> bool:
    """Whether a client may create the missing topic ``name`` by using it."""
    partitions = service.partitioned.partitions
    if partitions(name.full_name) > 0:
        return False  # the partitioned topic itself holds no data: its partitions do
    if name.is_partition:
        count = partitions(name.partitioned_topic_name)
        if count > 0:
            return name.partition < count
    override = service.policies.namespace_policy(name.namespace_name, AUTO_TOPIC_CREATION)
    if override is not None:
        return bool(override["allowAutoTopicCreation"])
    return service.config.allow_auto_topic_creation
