"""``/admin/v2/persistent/{tenant}/{ns}[/{topic}]``: topics, their policies, stats and lookup.

A non-partitioned topic is created (``PUT``), listed, deleted, unloaded; a partition
(``x-partition-N``) is an ordinary topic for all of these. Topic-level policies (deduplication,
retention, message TTL) are stored in ``PolicyStore`` and applied to the loaded topic at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

import broker.admin.stats as stats_json
from broker.admin.common import (
    AdminError,
    existing_namespace,
    int_field,
    is_partitioned,
    json_response,
    loaded_topic,
    no_content,
    parse_int,
    read_bool,
    read_json,
    service_of,
    topic_in_namespace,
)
from broker.blocking import run_blocking
from broker.errors import TopicDamaged
from broker.metadata.policies import MESSAGE_TTL, RETENTION
from broker.storage import OsFileLayer
from broker.storage.files import ensure_directory
from protocol.topic_name import NamespaceName, TopicName

if TYPE_CHECKING:
    from broker.service import BrokerService

TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"


def namespace_topics(service: BrokerService, namespace: str) -> list[str]:
    """Every topic of the namespace, as Pulsar lists them: non-partitioned topics and each
    partition of each partitioned topic (created or not yet used)."""
    names = set(service.topics_of_namespace(NamespaceName.parse(namespace)))
    for partitioned in service.partitioned.topics_of(namespace):
        base = TopicName.parse(partitioned)
        count = service.partitioned.partitions(partitioned)
        names.update(base.with_partition(i).full_name for i in range(count))
    return sorted(names)


async def list_topics(request: web.Request) -> web.Response:
    return json_response(namespace_topics(service_of(request), existing_namespace(request)))


async def create_topic(request: web.Request) -> web.Response:
    """``PUT``: create a non-partitioned topic (Pulsar's ``createNonPartitionedTopic``)."""
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        raise AdminError(409, f"Partitioned topic {name.full_name} already exists")
    if name.is_partition and service.partitioned.partitions(name.partitioned_topic_name) > 0:
        raise AdminError(
            409,
            f"{name.full_name} is a partition of partitioned topic {name.partitioned_topic_name}",
        )
    # Under the partitioned topics' lock: a concurrent create of a partitioned topic of the
    # same name must see this one (its folder appears only once the create has run).
    async with service.partitioned.changing:
        if is_partitioned(service, name) or service.topic_exists(name):
            raise AdminError(409, "This topic already exists")
        await _create(service, name)
    return no_content()


async def _create(service: BrokerService, name: TopicName) -> None:
    """Create (and load) ``name`` whatever the auto-creation policy: an explicit request."""
    # get_topic(create=True) honours allowAutoTopicCreation; an admin create must not. So
    # create the folder (durably, in a disk thread) and load it as an existing topic.
    from broker.storage.paths import topic_directory

    directory = topic_directory(service.data_path, name)
    await run_blocking(ensure_directory, service.file_layer or OsFileLayer(), directory)
    await service.get_topic(name, create=False)


async def delete_topic(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        raise AdminError(
            409, f"{name.full_name} is a partitioned topic: delete it with DELETE .../partitions"
        )
    if not service.topic_exists(name):
        raise AdminError(404, f"Topic {name.full_name} not found")
    await service.delete_topic(name)
    await service.policies.forget_topic(name.full_name)
    return no_content()


async def unload_topic(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        for index in range(service.partitioned.partitions(name.full_name)):
            await service.unload_topic(name.with_partition(index))
    else:
        await service.unload_topic(name)
    return no_content()


async def topic_stats(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        raise AdminError(404, f"{name.full_name} is a partitioned topic: use .../partitioned-stats")
    try:
        topic = await loaded_topic(request, name)
    except TopicDamaged as exc:
        # Pulsar answers 500 for a topic whose managed ledger fails to open.
        raise AdminError(500, exc.message, damaged=exc.damage) from exc
    return json_response(stats_json.topic_stats(topic))


async def internal_stats(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        partitions = service.partitioned.partitions(name.full_name)
        result: dict[str, Any] = {"metadata": {"partitions": partitions}, "partitions": {}}
        for index in range(partitions):
            partition = name.with_partition(index)
            if service.topic_exists(partition):
                topic = await service.get_topic(partition, create=False)
                result["partitions"][partition.full_name] = stats_json.internal_stats(topic)
        return json_response(result)
    try:
        topic = await loaded_topic(request, name)
    except TopicDamaged as exc:
        raise AdminError(500, exc.message, damaged=exc.damage) from exc
    return json_response(stats_json.internal_stats(topic))


async def terminate_topic(request: web.Request) -> web.Response:
    """``POST .../terminate``: no more messages; answers the last message's id (Pulsar's
    ``MessageIdImpl`` JSON). Producers are refused with TopicTerminatedError from then on,
    across restarts. Consumers read up to the last message, then get REACHED_END_OF_TOPIC
    (except C++-based clients, which do not know it: see
    ``broker.connection.consumers.understands_reached_end_of_topic``)."""
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        raise AdminError(405, "Termination of a partitioned topic is not allowed")
    try:
        topic = await loaded_topic(request, name)
    except TopicDamaged as exc:
        raise AdminError(500, exc.message, damaged=exc.damage) from exc
    last = await topic.terminate()
    return json_response(
        {
            "ledgerId": last.ledger_id,
            "entryId": last.entry_id,
            "partitionIndex": name.partition,
            "batchIndex": -1,
        }
    )


async def trigger_compaction(request: web.Request) -> web.Response:
    """``PUT .../compaction``: start a compaction (409 while one runs, as Pulsar)."""
    name = topic_in_namespace(request)
    service = service_of(request)
    names = [name]
    if is_partitioned(service, name):
        # As Pulsar: every partition (that exists yet) is compacted on its own.
        count = service.partitioned.partitions(name.full_name)
        names = [
            p for p in (name.with_partition(i) for i in range(count)) if service.topic_exists(p)
        ]
    topics = []
    for each in names:
        try:
            topics.append(await loaded_topic(request, each))
        except TopicDamaged as exc:
            raise AdminError(500, exc.message, damaged=exc.damage) from exc
    if any(topic.compaction.running for topic in topics):
        raise AdminError(409, "Compaction already in progress")
    for topic in topics:
        topic.compaction.trigger()
    return no_content()


async def compaction_status(request: web.Request) -> web.Response:
    """``GET .../compaction``: Pulsar's ``LongRunningProcessStatus`` (``status``, ``lastError``)."""
    name = topic_in_namespace(request)
    try:
        topic = await loaded_topic(request, name)
    except TopicDamaged as exc:
        raise AdminError(500, exc.message, damaged=exc.damage) from exc
    return json_response(topic.compaction.status_json())


# ---------------------------------------------------------------------------- topic policies


async def get_dedup(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    return json_response(service_of(request).policies.topic_dedup.get(name.full_name))


async def set_dedup(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    enabled = await read_bool(request)
    service = service_of(request)
    await service.policies.set_topic_dedup(name.full_name, enabled)
    await apply_dedup_policies(service, name.namespace_name)
    return no_content()


async def remove_dedup(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    await service.policies.set_topic_dedup(name.full_name, None)
    await apply_dedup_policies(service, name.namespace_name)
    return no_content()


async def apply_dedup_policies(service: BrokerService, namespace: str) -> None:
    """Re-resolve the effective dedup flag of every loaded topic of ``namespace``.

    The policy is stored (atomic write + fsync, in a disk thread so the loop keeps serving)
    before it is applied, so a crash in between leaves it to be applied at the next load."""
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == namespace:
            await topic.set_dedup_enabled(service.dedup_enabled_for(topic.name))


def apply_retention_policies(service: BrokerService) -> None:
    service.topic_policies.apply_retention_to(service.topics.values())


def apply_compaction_thresholds(service: BrokerService) -> None:
    service.topic_policies.apply_compaction_threshold_to(service.topics.values())


def retention_body(document: Any) -> dict[str, int]:
    """Pulsar's ``RetentionPolicies`` JSON, validated: -1 = unlimited."""
    return {
        "retentionTimeInMinutes": int_field(document, "retentionTimeInMinutes", minimum=-1),
        "retentionSizeInMB": int_field(document, "retentionSizeInMB", minimum=-1),
    }


async def get_retention(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    return json_response(service_of(request).policies.topic_policy(name.full_name, RETENTION))


async def set_retention(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    policy = retention_body(await read_json(request))
    service = service_of(request)
    await service.policies.set_topic_policy(name.full_name, RETENTION, policy)
    apply_retention_policies(service)
    return no_content()


async def remove_retention(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    await service.policies.set_topic_policy(name.full_name, RETENTION, None)
    apply_retention_policies(service)
    return no_content()


async def get_ttl(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    return json_response(service_of(request).policies.topic_policy(name.full_name, MESSAGE_TTL))


async def set_ttl(request: web.Request) -> web.Response:
    """Pulsar takes the TTL as a query parameter here (``?messageTTL=seconds``)."""
    name = topic_in_namespace(request)
    seconds = parse_int(request.query.get("messageTTL"), "messageTTL", minimum=0, status=412)
    await service_of(request).policies.set_topic_policy(name.full_name, MESSAGE_TTL, seconds)
    return no_content()


async def remove_ttl(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    await service_of(request).policies.set_topic_policy(name.full_name, MESSAGE_TTL, None)
    return no_content()


def routes() -> list[web.RouteDef]:
    ns = "/admin/v2/persistent/{tenant}/{ns}"
    return [
        web.get(ns, list_topics),
        web.put(TOPIC, create_topic),
        web.delete(TOPIC, delete_topic),
        web.put(TOPIC + "/unload", unload_topic),
        web.get(TOPIC + "/stats", topic_stats),
        web.get(TOPIC + "/internalStats", internal_stats),
        web.get(TOPIC + "/partitioned-internalStats", internal_stats),
        web.post(TOPIC + "/terminate", terminate_topic),
        web.put(TOPIC + "/compaction", trigger_compaction),
        web.get(TOPIC + "/compaction", compaction_status),
        web.get(TOPIC + "/deduplicationEnabled", get_dedup),
        web.post(TOPIC + "/deduplicationEnabled", set_dedup),
        web.delete(TOPIC + "/deduplicationEnabled", remove_dedup),
        web.get(TOPIC + "/retention", get_retention),
        web.post(TOPIC + "/retention", set_retention),
        web.delete(TOPIC + "/retention", remove_retention),
        web.get(TOPIC + "/messageTTL", get_ttl),
        web.post(TOPIC + "/messageTTL", set_ttl),
        web.delete(TOPIC + "/messageTTL", remove_ttl),
    ]
