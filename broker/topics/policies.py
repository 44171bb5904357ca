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
* Compaction threshold: the namespace's ``compaction_threshold``, else
  ``brokerServiceCompactionThresholdInBytes`` (0 = never), starts a compaction by itself.

``TopicPolicies`` gets the stores and the config it reads, not the whole service: the admin API
and the topic registry both hold one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.config import BrokerConfig
from broker.metadata.partitions import PartitionStore
from broker.metadata.policies import (
    AUTO_TOPIC_CREATION,
    COMPACTION_THRESHOLD,
    MESSAGE_TTL,
    RETENTION,
    PolicyStore,
)
from protocol.topic_name import PERSISTENT, TopicName

if TYPE_CHECKING:
    from broker.topics.topic import Topic


class TopicPolicies:
    """The effective policies of topics, and applying them to loaded ones."""

    def __init__(
        self, policies: PolicyStore, partitioned: PartitionStore, config: BrokerConfig
    ) -> None:
        self._policies = policies
        self._partitioned = partitioned
        self._config = config

    def _effective(self, name: TopicName, key: str) -> Any:
        policies = self._policies
        value = policies.topic_policy(name.full_name, key)
        if value is None and name.is_partition:
            value = policies.topic_policy(name.partitioned_topic_name, key)
        if value is None:
            value = policies.namespace_policy(name.namespace_name, key)
        return value

    def retention_of(self, name: TopicName) -> tuple[int, int]:
        """(minutes, MB) of the effective retention policy; -1 = unlimited, as in Pulsar."""
        policy = self._effective(name, RETENTION)
        if policy is None:
            config = self._config
            return config.default_retention_time_in_minutes, config.default_retention_size_in_mb
        return int(policy["retentionTimeInMinutes"]), int(policy["retentionSizeInMB"])

    def apply_retention(self, topic: Topic) -> None:
        """Make the topic's ledger trim with its effective retention (from the next trim on)."""
        minutes, megabytes = self.retention_of(topic.name)
        ledger = topic.ledger
        if (ledger.config.retention_time_minutes, ledger.config.retention_size_mb) != (
            minutes,
            megabytes,
        ):
            ledger.config = dataclasses.replace(
                ledger.config, retention_time_minutes=minutes, retention_size_mb=megabytes
            )

    def message_ttl_seconds(self, name: TopicName) -> int:
        """The effective message TTL in seconds, 0 when messages never expire."""
        value = self._effective(name, MESSAGE_TTL)
        return int(value) if value is not None else 0

    def auto_topic_creation_allowed(self, name: TopicName) -> bool:
        """Whether a client may create the missing topic ``name`` by using it."""
        partitions = self._partitioned.partitions
        if partitions(name.full_name) > 0:
            return False  # the partitioned topic itself holds no data: its partitions do
        if name.is_partition:
            count = partitions(name.partitioned_topic_name)
            if count > 0:
                return name.partition < count
        override = self._policies.namespace_policy(name.namespace_name, AUTO_TOPIC_CREATION)
        if override is not None:
            return bool(override["allowAutoTopicCreation"])
        return self._config.allow_auto_topic_creation

    def apply_compaction_threshold(self, topic: Topic) -> None:
        """Set the topic's automatic-compaction threshold: the namespace's
        ``compaction_threshold`` policy, else ``brokerServiceCompactionThresholdInBytes``."""
        policy = self._policies.namespace_policy(topic.name.namespace_name, COMPACTION_THRESHOLD)
        if policy is None:
            policy = self._config.broker_service_compaction_threshold_in_bytes
        topic.compaction_threshold_bytes = int(policy)

    def apply_on_load(self, topic: Topic) -> None:
        """Everything a freshly loaded persistent topic takes from the policies."""
        self.apply_retention(topic)
        self.apply_compaction_threshold(topic)

    def apply_retention_to(self, topics: Iterable[Topic]) -> None:
        """After a retention policy change: every loaded topic."""
        for topic in list(topics):
            self.apply_retention(topic)

    def apply_compaction_threshold_to(self, topics: Iterable[Topic]) -> None:
        """After a compaction-threshold policy change: every loaded persistent topic."""
        for topic in list(topics):
            if topic.name.domain == PERSISTENT:
                self.apply_compaction_threshold(topic)
