"""Discovery on one connection: PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE,
GET_SCHEMA and GET_OR_CREATE_SCHEMA, each checked against the connection's role (and a proxy's
original principal) before anything about the resource is looked up.

One answer departs from that order, as Pulsar's does: PARTITIONED_METADATA on a tenant that does
not exist is ``TopicNotFound`` (Java's authorization looks the tenant up and fails with "not
found", which that command maps to ``TopicNotFound``; the official client's
``test_create_producer_failure`` expects it), where LOOKUP still answers ``AuthorizationError``.

Like ``producers.py`` and ``consumers.py`` this endpoint is typed against ``ConnectionHandle``
and writes only through the connection (``core.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.errors import BrokerError, InvalidTopicName, ServiceNotReady, TopicNotFound, to_wire
from broker.schemas.registry import SchemaRegistry
from broker.topics.non_persistent import non_persistent_topics_of
from protocol import commands, pb
from protocol.enums import TopicListMode
from protocol.errors import ServerError
from protocol.framing import Frame
from protocol.topic_name import NON_PERSISTENT, InvalidTopicNameError, NamespaceName, TopicName

if TYPE_CHECKING:
    from broker.connection.handle import ConnectionHandle

__all__ = ["DiscoveryEndpoint"]

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type


class DiscoveryEndpoint:
    """Lookups, topic lists and schemas for one connection."""

    def __init__(self, conn: ConnectionHandle) -> None:
        self._conn = conn
        self._service = conn.service

    def handlers(self) -> dict[int, Callable[[Frame], None]]:
        return {
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            T.GET_SCHEMA: self._on_get_schema,
            T.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }

    def _on_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitionMetadata
        request_id = cmd.request_id
        try:
            topic = self._conn.parse_topic(cmd.topic)
            if not self._service.policies.has_tenant(topic.tenant):
                # As Java: the tenant lookup inside authorization fails with "not found",
                # which PARTITIONED_METADATA answers TopicNotFound (LOOKUP: AuthorizationError).
                raise TopicNotFound(f"Tenant or namespace or topic does not exist: {topic.tenant}")
            self._conn.authorizer.check_lookup(
                self._conn.role, topic, original=self._conn.original_principal
            )
            partitions = self._service.partitions_of(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._conn.write(
                commands.partitioned_metadata_response(request_id, error=code, message=message)
            )
            return
        self._conn.write(commands.partitioned_metadata_response(request_id, partitions))

    def _on_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookupTopic
        request_id = cmd.request_id
        listener = cmd.advertised_listener_name
        if listener:
            self._conn.write(
                commands.lookup_response(
                    request_id,
                    error=ServerError.ServiceNotReady,
                    message=f"the broker do not have {listener} listener",
                )
            )
            return
        try:
            topic = self._conn.parse_topic(cmd.topic)
            self._conn.authorizer.check_lookup(
                self._conn.role, topic, original=self._conn.original_principal
            )
            self._service.check_namespace(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._conn.write(commands.lookup_response(request_id, error=code, message=message))
            return
        if self._service.damaged.get(topic.full_name) is not None:
            # Known damage answers the lookup (checking that the files did not change since
            # reads file metadata, so off the loop); unknown damage is found by the load that
            # PRODUCER/SUBSCRIBE triggers, as Pulsar's lookup does not load the topic either.
            self._conn.spawn(self._lookup_damaged(request_id, topic))
            return
        if self._service.cluster is not None and topic.domain != NON_PERSISTENT:
            self._conn.spawn(self._lookup_in_cluster(request_id, topic, cmd.authoritative))
            return
        self._lookup_found(request_id)

    async def _lookup_in_cluster(self, request_id: int, topic: TopicName, authority: bool) -> None:
        """Cluster mode: Connect to the bundle's owner, or Redirect to the candidate broker,
        as Pulsar's ``TopicLookupBase`` answers (broker/cluster/service.py)."""
        cluster = self._service.cluster
        assert cluster is not None
        try:
            answer = await cluster.lookup(topic, authority)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.warning("lookup %d on %s failed: %s", request_id, self._conn.peer, exc)
                exc = ServiceNotReady(f"lookup of {topic.full_name} failed: {exc}")
            code, message = to_wire(exc)
            self._conn.write(commands.lookup_response(request_id, error=code, message=message))
            return
        self._conn.write(
            commands.lookup_response(
                request_id,
                answer.broker.service_url or None,
                broker_service_url_tls=answer.broker.service_url_tls or None,
                redirect=answer.redirect,
                authoritative=answer.authoritative,
            )
        )

    async def _lookup_damaged(self, request_id: int, topic: TopicName) -> None:
        try:
            await self._service.refuse_if_damaged(topic)
        except Exception as exc:
            if not isinstance(exc, BrokerError):
                log.exception("lookup %d on %s failed", request_id, self._conn.peer)
            code, message = to_wire(exc)
            self._conn.write(commands.lookup_response(request_id, error=code, message=message))
            return
        self._lookup_found(request_id)

    def _lookup_found(self, request_id: int) -> None:
        # "Connect to me", through the client's own service URL: the client keeps one socket.
        self._conn.write(
            commands.lookup_response(
                request_id,
                self._service.service_url or None,
                broker_service_url_tls=self._service.service_url_tls or None,
                authoritative=True,
                proxy_through_service_url=True,
            )
        )

    def _on_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        try:
            namespace = NamespaceName.parse(cmd.namespace)
        except InvalidTopicNameError as exc:
            self._conn.reply_error(cmd.request_id, InvalidTopicName(str(exc)))
            return
        try:
            self._conn.authorizer.check_list_topics(
                self._conn.role, namespace, original=self._conn.original_principal
            )
        except BrokerError as exc:
            self._conn.reply_error(cmd.request_id, exc)
            return
        topics = self._service.topics_of_namespace(namespace)
        if int(cmd.mode) != TopicListMode.PERSISTENT:
            # NON_PERSISTENT / ALL (RegexSubscriptionMode): the loaded in-memory topics too.
            in_memory = non_persistent_topics_of(self._service.topics, namespace)
            persistent = int(cmd.mode) == TopicListMode.ALL
            topics = (topics if persistent else []) + in_memory
        self._conn.write(commands.get_topics_of_namespace_response(cmd.request_id, topics))

    # ------------------------------------------------------------------ schema
    # Kept under the topic's full name (as PRODUCER stores them): every spelling of a topic
    # shares one schema, and a name that does not parse gets an error response.

    def _on_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.getSchema
        version = cmd.schema_version if cmd.HasField("schema_version") else None
        try:
            topic = self._conn.parse_topic(cmd.topic)
            self._conn.authorizer.check_lookup(
                self._conn.role, topic, original=self._conn.original_principal
            )
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._conn.write(
                commands.get_schema_response(cmd.request_id, error_code=code, error_message=message)
            )
            return
        found = self._service.schemas.get(topic.full_name, version)
        if found is None:
            self._conn.write(
                commands.get_schema_response(
                    cmd.request_id,
                    error_code=ServerError.TopicNotFound,
                    error_message=f"Topic not found or no-schema {topic.full_name}",
                )
            )
            return
        schema_bytes, schema_version = found
        schema = pb.Schema()
        schema.ParseFromString(schema_bytes)
        self._conn.write(
            commands.get_schema_response(
                cmd.request_id, schema=schema, schema_version=schema_version
            )
        )

    def _on_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.getOrCreateSchema
        try:
            topic = self._conn.parse_topic(cmd.topic)
            self._conn.authorizer.check_produce(
                self._conn.role, topic, original=self._conn.original_principal
            )
            self._service.check_namespace(topic)
        except BrokerError as exc:
            code, message = to_wire(exc)
            self._conn.write(
                commands.get_or_create_schema_response(
                    cmd.request_id, error_code=code, error_message=message
                )
            )
            return
        service = self._service
        schemas = SchemaRegistry(service.schemas, service.policies, service.config)

        async def store() -> None:  # durable before the answer, written off the event loop
            try:
                version = await schemas.add_schema(topic, cmd.schema)  # checked as a producer's
            except BrokerError as exc:  # refused in the response itself, as Pulsar
                code, message = to_wire(exc)
                self._conn.write(
                    commands.get_or_create_schema_response(
                        cmd.request_id, error_code=code, error_message=message
                    )
                )
                return
            self._conn.write(
                commands.get_or_create_schema_response(cmd.request_id, schema_version=version)
            )

        self._conn.request(cmd.request_id, store)
