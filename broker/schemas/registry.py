"""Where a schema meets a topic's versions: PRODUCER, GET_OR_CREATE_SCHEMA and SUBSCRIBE.

Pulsar's rules (``AbstractTopic.addSchema``, ``SchemaRegistryServiceImpl.putSchemaIfAbsent``,
``checkConsumerCompatibility``, ``PersistentTopic.addSchemaIfIdleOrCheckCompatible``,
``ServerCnx``'s producer and subscribe paths):

* a producer's schema (and GET_OR_CREATE_SCHEMA's) that is already a version gets that version,
  whatever the strategy; a new one needs ``isAllowAutoUpdateSchema`` and compatibility with
  the latest version (all versions for a ``_TRANSITIVE`` strategy), then becomes the next
  version;
* a producer without a schema is refused on a topic with one only if schema validation is
  enforced;
* a consumer's schema on an idle topic (no schema, no producers, no consumers, no entries) is
  added as a producer's would be; otherwise it must be readable against the topic's schema:
  BACKWARD against the latest for BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL, the strategy
  itself against every version for the others. A busy topic without a schema refuses it.

Everything is refused with ``IncompatibleSchema``, the error Pulsar's clients report as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.errors import IncompatibleSchema
from broker.metadata.policies import (
    ALLOW_AUTO_UPDATE_SCHEMA,
    SCHEMA_AUTO_UPDATE_STRATEGY,
    SCHEMA_COMPATIBILITY_STRATEGY,
    SCHEMA_VALIDATION_ENFORCED,
    PolicyStore,
)
from broker.metadata.schemas import SchemaStore
from broker.schemas.checks import SchemaData, check_all, check_latest, same_schema, type_name
from broker.schemas.strategy import Strategy, effective_strategy
from protocol import pb
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from broker.topics.topic import Topic

__all__ = ["SchemaPolicy", "SchemaRegistry"]

#: Strategies whose consumers are checked as BACKWARD against the latest version (Pulsar's).
_CONSUMER_READS_LATEST = frozenset(
    {Strategy.BACKWARD, Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL}
)


@dataclass(frozen=True)
class SchemaPolicy:
    """A topic's effective schema policies."""

    strategy: Strategy
    allow_auto_update: bool
    validation_enforced: bool


class SchemaRegistry:
    """The schema store judged by the namespace policies and the broker config."""

    def __init__(self, store: SchemaStore, policies: PolicyStore, config: BrokerConfig) -> None:
        self._store = store
        self._policies = policies
        self._config = config

    def policy(self, name: TopicName) -> SchemaPolicy:
        namespace = name.namespace_name
        value = self._policies.namespace_policy
        auto_update = value(namespace, ALLOW_AUTO_UPDATE_SCHEMA)
        enforced = value(namespace, SCHEMA_VALIDATION_ENFORCED)
        config = self._config
        return SchemaPolicy(
            strategy=effective_strategy(
                value(namespace, SCHEMA_COMPATIBILITY_STRATEGY),
                value(namespace, SCHEMA_AUTO_UPDATE_STRATEGY),
                config.schema_compatibility_strategy,
            ),
            allow_auto_update=config.is_allow_auto_update_schema_enabled
            if auto_update is None
            else bool(auto_update),
            validation_enforced=config.is_schema_validation_enforced
            if enforced is None
            else bool(enforced),
        )

    async def add_schema(self, name: TopicName, schema: pb.Schema) -> bytes:
        """The version ``schema`` is (or becomes) for the topic; IncompatibleSchema if it may
        not join (producers and GET_OR_CREATE_SCHEMA)."""
        new = SchemaData.of(schema)
        policy = self.policy(name)

        def admit(stored: list[bytes]) -> int | None:
            versions = [SchemaData.parse(v) for v in stored]
            for index, version in enumerate(versions):
                if same_schema(version, new):
                    return index
            if not policy.allow_auto_update:
                raise IncompatibleSchema("Schema not found and schema auto updating is disabled.")
            check = check_all if policy.strategy.transitive else check_latest
            check(versions, new, policy.strategy)
            return None

        return await self._store.put(name.full_name, schema.SerializeToString(), admit)

    def check_producer_without_schema(self, name: TopicName) -> None:
        """A producer that declares no schema (BYTES): refused on a topic with a schema only
        when schema validation is enforced."""
        if self.policy(name).validation_enforced and self._store.versions(name.full_name):
            raise IncompatibleSchema(
                "Producers cannot connect or send message without a schema to topics with a "
                "schema if SchemaValidationEnforced is enabled"
            )

    async def add_or_check_for_consumer(self, topic: Topic, schema: pb.Schema) -> None:
        """SUBSCRIBE with a schema: added if the topic is idle, else checked (module doc)."""
        name = topic.name
        stored = self._store.versions(name.full_name)
        if not stored and not in_use(topic):
            await self.add_schema(name, schema)
            return
        strategy = self.policy(name).strategy
        if strategy is Strategy.ALWAYS_COMPATIBLE:
            return
        new = SchemaData.of(schema)
        if not stored:
            raise IncompatibleSchema(
                "Failed to add schema to an active topic with empty(BYTES) schema: new schema "
                f"type {type_name(new.type)}"
            )
        versions = [SchemaData.parse(v) for v in stored]
        if strategy in _CONSUMER_READS_LATEST:
            check_latest(versions, new, Strategy.BACKWARD)
        else:
            check_all(versions, new, strategy)


def in_use(topic: Topic) -> bool:
    """Pulsar's "not idle": producers, consumers, or entries ever written."""
    return (
        bool(topic.producers.producers)
        or any(sub.consumers for sub in topic.subscriptions.values())
        or topic.ledger.last_confirmed_position is not None
    )
