"""Topic discovery: partitioned metadata, LOOKUP and the topic list of a namespace."""

from __future__ import annotations

from collections.abc import Iterable

from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.fields import T
from protocol.enums import TopicListMode
from protocol.errors import LocalProtocolError, ServerError
from protocol.framing import encode_command
from protocol.ids import to_u64


def partitioned_metadata(topic: str, request_id: int) -> bytes:
    """PARTITIONED_METADATA request."""
    cmd = T(type=T.PARTITIONED_METADATA)
    sub = cmd.partitionMetadata
    sub.topic = topic
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def partitioned_metadata_response(
    request_id: int,
    partitions: int = 0,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """PARTITIONED_METADATA_RESPONSE: ``partitions`` (0 = not partitioned), or a failure."""
    cmd = T(type=T.PARTITIONED_METADATA_RESPONSE)
    sub = cmd.partitionMetadataResponse
    sub.request_id = to_u64(request_id)
    lookup_type = pb.CommandPartitionedTopicMetadataResponse
    if error is None:
        sub.response = lookup_type.Success
        sub.partitions = partitions
    else:
        sub.response = lookup_type.Failed
        sub.error = error  # type: ignore[assignment]
        sub.message = message or ""
    return encode_command(cmd)


def lookup(
    topic: str,
    request_id: int,
    *,
    authoritative: bool = False,
    advertised_listener_name: str | None = None,
) -> bytes:
    """LOOKUP request."""
    cmd = T(type=T.LOOKUP)
    sub = cmd.lookupTopic
    sub.topic = topic
    sub.request_id = to_u64(request_id)
    sub.authoritative = authoritative
    if advertised_listener_name is not None:
        sub.advertised_listener_name = advertised_listener_name
    return encode_command(cmd)


def lookup_response(
    request_id: int,
    broker_service_url: str | None = None,
    *,
    broker_service_url_tls: str | None = None,
    redirect: bool = False,
    authoritative: bool = True,
    proxy_through_service_url: bool = False,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """LOOKUP_RESPONSE: Connect (default), Redirect (``redirect=True``) or Failed (``error``).

    Raises:
        LocalProtocolError: neither a URL nor an error was given.
    """
    cmd = T(type=T.LOOKUP_RESPONSE)
    sub = cmd.lookupTopicResponse
    sub.request_id = to_u64(request_id)
    lookup_type = pb.CommandLookupTopicResponse
    if error is not None:
        sub.response = lookup_type.Failed
        sub.error = error  # type: ignore[assignment]
        sub.message = message or ""
        return encode_command(cmd)
    if broker_service_url is None and broker_service_url_tls is None:
        raise LocalProtocolError("a successful lookup response needs a broker URL")
    sub.response = lookup_type.Redirect if redirect else lookup_type.Connect
    if broker_service_url is not None:
        sub.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        sub.brokerServiceUrlTls = broker_service_url_tls
    sub.authoritative = authoritative
    sub.proxy_through_service_url = proxy_through_service_url
    return encode_command(cmd)


def get_topics_of_namespace(
    namespace: str,
    request_id: int,
    *,
    mode: TopicListMode | int = TopicListMode.PERSISTENT,
    topics_pattern: str | None = None,
    topics_hash: str | None = None,
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE request (``namespace`` is ``tenant/ns``)."""
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE)
    sub = cmd.getTopicsOfNamespace
    sub.request_id = to_u64(request_id)
    sub.namespace = namespace
    sub.mode = mode  # type: ignore[assignment]
    if topics_pattern is not None:
        sub.topics_pattern = topics_pattern
    if topics_hash is not None:
        sub.topics_hash = topics_hash
    return encode_command(cmd)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE_RESPONSE: full topic names (the client filters unless told)."""
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    sub = cmd.getTopicsOfNamespaceResponse
    sub.request_id = to_u64(request_id)
    sub.topics.extend(topics)
    sub.filtered = filtered
    sub.changed = changed
    if topics_hash is not None:
        sub.topics_hash = topics_hash
    return encode_command(cmd)
