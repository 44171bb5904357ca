"""Partitioned topics: ``PUT|GET|POST|DELETE .../{topic}/partitions``, ``partitioned-stats`` and
the list of partitioned topics, as Pulsar's ``PersistentTopics``.

A partitioned topic is metadata only (``PartitionStore``: name -> count); its partitions are
ordinary topics ``<name>-partition-<i>``, so dedup, exclusive producers, batch-index acks and
stats are per partition with no extra code. Creating one makes the partitions' folders at once
(Pulsar creates the partitions with the topic); growing it creates the new partitions and gives
them the durable subscriptions of partition 0 at the earliest position (Pulsar does the same, so
a consumer that has not yet noticed the new partitions loses nothing published to them).
Shrinking is refused (422, Pulsar's status and wording). Creations, growths and deletions run
one at a time (``PartitionStore.changing``): each awaits between reading the count and storing
the new one, and two growths interleaved could otherwise store the smaller count last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

import broker.admin.stats as stats_json
from broker.admin.common import (
    AdminError,
    existing_namespace,
    json_response,
    no_content,
    query_bool,
    read_int,
    service_of,
    topic_in_namespace,
)
from broker.admin.topics import TOPIC
from broker.blocking import run_blocking
from broker.storage import OsFileLayer
from broker.storage.files import ensure_directory
from protocol.topic_name import PARTITION_SUFFIX, NamespaceName, TopicName

if TYPE_CHECKING:
    from broker.service import BrokerService

#: Pulsar's ``maxNumPartitionsPerPartitionedTopic`` defaults to unlimited; here each partition
#: is a folder made (and, on growth, a topic loaded) during the request, so bound it.
MAX_PARTITIONS = 4096


def _check_count(partitions: int) -> None:
    if partitions <= 0:
        raise AdminError(406, "Number of partitions should be more than 0")
    if partitions > MAX_PARTITIONS:
        raise AdminError(
            406, f"Number of partitions should be less than or equal to {MAX_PARTITIONS}"
        )


def _partitioned(service: BrokerService, name: TopicName) -> int:
    """The partition count of ``name``; 404 if it is not a partitioned topic."""
    count = 0 if name.is_partition else service.partitioned.partitions(name.full_name)
    if count <= 0:
        raise AdminError(404, f"Partitioned topic {name.full_name} does not exist")
    return count


async def _make_partitions(service: BrokerService, name: TopicName, first: int, end: int) -> None:
    from broker.storage.paths import topic_directory

    layer = service.file_layer or OsFileLayer()
    for index in range(first, end):
        directory = topic_directory(service.data_path, name.with_partition(index))
        await run_blocking(ensure_directory, layer, directory)


async def create_partitioned(request: web.Request) -> web.Response:
    async with service_of(request).partitioned.changing:
        return await _create_partitioned(request)


async def _create_partitioned(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    partitions = await read_int(request, "Number of partitions")
    service = service_of(request)
    if PARTITION_SUFFIX in name.local_name:
        raise AdminError(
            412, f"Invalid topic name: {name.full_name}, should not contain {PARTITION_SUFFIX}"
        )
    _check_count(partitions)
    if service.partitioned.partitions(name.full_name) > 0 or service.topic_exists(name):
        raise AdminError(409, "This topic already exists")
    prefix = name.full_name + PARTITION_SUFFIX
    strays = [
        t
        for t in service.topics_of_namespace(NamespaceName(name.tenant, name.namespace))
        if t.startswith(prefix)
    ]
    if strays:
        # Topics named like its partitions exist already (made by hand): adopting them as
        # partitions would mix unrelated data into the partitioned topic.
        raise AdminError(409, f"This topic already exists: {', '.join(strays[:3])}")
    try:
        name.with_partition(partitions - 1)
    except ValueError as exc:  # InvalidTopicNameError: the partitions' names would be too long
        raise AdminError(412, f"Topic name is not valid: {exc}") from exc
    await service.partitioned.set(name.full_name, partitions)
    await _make_partitions(service, name, 0, partitions)
    return no_content()


async def get_partitioned_metadata(request: web.Request) -> web.Response:
    """Pulsar's ``PartitionedTopicMetadata``; 0 partitions for a non-partitioned or unknown
    topic (the client then uses the topic itself), 404 only for an unknown namespace."""
    name = topic_in_namespace(request)
    service = service_of(request)
    partitions = 0 if name.is_partition else service.partitioned.partitions(name.full_name)
    return json_response({"partitions": partitions, "properties": {}, "deleted": False})


async def update_partitioned(request: web.Request) -> web.Response:
    async with service_of(request).partitioned.changing:
        return await _update_partitioned(request)


async def _update_partitioned(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    wanted = await read_int(request, "Number of partitions")
    service = service_of(request)
    current = 0 if name.is_partition else service.partitioned.partitions(name.full_name)
    if current <= 0:
        if not service.topic_exists(name):
            raise AdminError(404, f"Partitioned topic {name.full_name} does not exist")
        raise AdminError(409, f"Topic {name.full_name} is not the partitioned topic.")
    if wanted < current:
        raise AdminError(
            422, f"Expect partitions {wanted} can't less than current partitions {current}."
        )
    if wanted == current:
        return no_content()
    _check_count(wanted)
    try:
        name.with_partition(wanted - 1)
    except ValueError as exc:
        raise AdminError(412, f"Topic name is not valid: {exc}") from exc
    await _make_partitions(service, name, current, wanted)
    await _copy_subscriptions(service, name, current, wanted)
    await service.partitioned.set(name.full_name, wanted)
    return no_content()


async def _copy_subscriptions(
    service: BrokerService, name: TopicName, first: int, end: int
) -> None:
    """Give the new partitions partition 0's durable subscriptions, at the earliest entry."""
    source = name.with_partition(0)
    if not service.topic_exists(source):
        return
    topic = await service.get_topic(source, create=False)
    names = [n for n, sub in topic.subscriptions.items() if sub.durable]
    for index in range(first, end):
        partition = await service.get_topic(name.with_partition(index), create=False)
        for sub_name in names:
            await partition.get_or_create_subscription(
                sub_name, durable=True, start=None, initial_earliest=True
            )


async def delete_partitioned(request: web.Request) -> web.Response:
    async with service_of(request).partitioned.changing:
        return await _delete_partitioned(request)


async def _delete_partitioned(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    count = _partitioned(service, name)
    for index in range(count):
        partition = name.with_partition(index)
        await service.delete_topic(partition)
        await service.policies.forget_topic(partition.full_name)
    await service.policies.forget_topic(name.full_name)
    await service.partitioned.delete(name.full_name)
    return no_content()


async def partitioned_stats(request: web.Request) -> web.Response:
    name = topic_in_namespace(request)
    service = service_of(request)
    count = _partitioned(service, name)
    per_partition: dict[str, dict[str, Any]] = {}
    for index in range(count):
        partition = name.with_partition(index)
        if service.topic_exists(partition):
            topic = await service.get_topic(partition, create=False)
            per_partition[partition.full_name] = stats_json.topic_stats(topic)
    detail = query_bool(request, "perPartition", default=True)
    return json_response(
        stats_json.partitioned_stats(count, per_partition, per_partition_detail=detail)
    )


async def list_partitioned(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    return json_response(service_of(request).partitioned.topics_of(namespace))


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/v2/persistent/{tenant}/{ns}/partitioned", list_partitioned),
        web.put(TOPIC + "/partitions", create_partitioned),
        web.get(TOPIC + "/partitions", get_partitioned_metadata),
        web.post(TOPIC + "/partitions", update_partitioned),
        web.delete(TOPIC + "/partitions", delete_partitioned),
        web.get(TOPIC + "/partitioned-stats", partitioned_stats),
    ]
