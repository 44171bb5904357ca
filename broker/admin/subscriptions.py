"""Subscriptions of a topic: list, create at a position, delete, skip-all, reset-cursor (by time
or by message id) and expire-messages, on ``.../{topic}/subscription(s)`` as Pulsar.

On a partitioned topic each operation applies to every partition (a reset by message id needs
the message's partition: Pulsar's ``MessageIdImpl`` JSON carries ``partitionIndex``).
A reset disconnects the subscription's consumers first, then moves the cursor (Java's order;
the clients reconnect and read from the new position).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import (
    AdminError,
    is_partitioned,
    json_response,
    no_content,
    parse_int,
    path_part,
    query_bool,
    read_json,
    service_of,
    subscription_name,
    topic_in_namespace,
)
from broker.admin.topics import TOPIC
from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.storage import Position
from broker.topics.message_expiry import expire_messages
from broker.topics.positions import find_position_by_publish_time, seek_target
from protocol.ids import MessageId

if TYPE_CHECKING:
    from broker.dispatch.subscription import Subscription
    from broker.topics.topic import Topic


async def _topics(request: web.Request) -> list[Topic]:
    """The topic of the path, or each existing partition of a partitioned one (404 if none)."""
    name = topic_in_namespace(request)
    service = service_of(request)
    if is_partitioned(service, name):
        names = [
            name.with_partition(i) for i in range(service.partitioned.partitions(name.full_name))
        ]
    else:
        names = [name]
    existing = [n for n in names if service.topic_exists(n)]
    if not existing:
        raise AdminError(404, f"Topic {name.full_name} not found")
    return [await service.get_topic(n, create=False) for n in existing]


def _subscription(topic: Topic, name: str) -> Subscription:
    sub = topic.subscriptions.get(name)
    if sub is None or name == DEDUP_CURSOR:
        raise AdminError(404, "Subscription not found")
    return sub


async def list_subscriptions(request: web.Request) -> web.Response:
    names: set[str] = set()
    for topic in await _topics(request):
        names.update(n for n, sub in topic.subscriptions.items() if sub.durable)
    names.discard(DEDUP_CURSOR)
    return json_response(sorted(names))


def _message_id(document: Any) -> tuple[MessageId, int]:
    """Pulsar's ``MessageIdImpl`` JSON: ``ledgerId``, ``entryId``, ``partitionIndex``."""
    if not isinstance(document, dict):
        raise AdminError(400, "Message id must be a JSON object with ledgerId and entryId")
    try:
        ledger_id, entry_id = int(document["ledgerId"]), int(document["entryId"])
        partition = int(document.get("partitionIndex", -1))
    except (KeyError, TypeError, ValueError) as exc:
        raise AdminError(400, f"Message id needs integer ledgerId and entryId: {exc}") from exc
    return MessageId(ledger_id, entry_id), partition


async def create_subscription(request: web.Request) -> web.Response:
    """``PUT``: body = the message id to start at (default latest, as Pulsar)."""
    name = subscription_name(request)
    if name == DEDUP_CURSOR:
        raise AdminError(412, f"Subscription name {DEDUP_CURSOR} is reserved")
    text = (await request.text()).strip()
    start = _message_id(await read_json(request))[0] if text else None
    topics = await _topics(request)
    if any(name in t.subscriptions for t in topics):
        raise AdminError(409, "Subscription already exists for topic")
    for topic in topics:
        earliest = start is not None and start.ledger_id < 0
        sub = await topic.get_or_create_subscription(
            name, durable=True, start=None, initial_earliest=earliest
        )
        if start is not None and start.ledger_id >= 0:
            sub.reset_to(seek_target(topic.ledger, start))
    return no_content()


async def delete_subscription(request: web.Request) -> web.Response:
    name = subscription_name(request)
    force = query_bool(request, "force")
    topics = await _topics(request)
    subs = [(t, _subscription(t, name)) for t in topics if name in t.subscriptions]
    if not subs:
        raise AdminError(404, "Subscription not found")
    if not force and any(sub.consumers for _, sub in subs):
        raise AdminError(412, "Subscription has active connected consumers")
    for topic, sub in subs:
        sub.disconnect_all()
        await topic.delete_subscription(name)
    return no_content()


async def skip_all(request: web.Request) -> web.Response:
    """Clear the backlog: everything published so far counts as consumed."""
    name = subscription_name(request)
    for topic in await _topics(request):
        _subscription(topic, name).skip_through(topic.last_confirmed_position())
    return no_content()


async def reset_by_time(request: web.Request) -> web.Response:
    name = subscription_name(request)
    timestamp = parse_int(path_part(request, "timestamp"), "timestamp (ms)", minimum=0)
    for topic in await _topics(request):
        sub = _subscription(topic, name)
        target = await find_position_by_publish_time(topic.ledger, timestamp)
        sub.disconnect_all()
        sub.reset_to(target)
    return no_content()


async def reset_by_message_id(request: web.Request) -> web.Response:
    name = subscription_name(request)
    message_id, partition = _message_id(await read_json(request))
    topics = await _topics(request)
    if len(topics) > 1 or is_partitioned(service_of(request), topics[0].name):
        if partition < 0:
            raise AdminError(412, "Reset by message id on a partitioned topic needs partitionIndex")
        topics = [t for t in topics if t.name.partition == partition]
        if not topics:
            raise AdminError(404, f"Partition {partition} not found")
    for topic in topics:
        sub = _subscription(topic, name)
        target = seek_target(topic.ledger, message_id)
        if query_bool(request, "isExcluded"):
            target = topic.next_position(Position(target.ledger_id, target.entry_id))
        sub.disconnect_all()
        sub.reset_to(target)
    return no_content()


def _seconds(request: web.Request) -> int:
    return parse_int(path_part(request, "seconds"), "expireTimeInSeconds", minimum=0)


async def expire(request: web.Request) -> web.Response:
    name = subscription_name(request)
    seconds = _seconds(request)
    for topic in await _topics(request):
        await expire_messages(topic, seconds, [_subscription(topic, name)])
    return no_content()


async def expire_all_subscriptions(request: web.Request) -> web.Response:
    seconds = _seconds(request)
    for topic in await _topics(request):
        await expire_messages(topic, seconds)
    return no_content()


def routes() -> list[web.RouteDef]:
    sub = TOPIC + "/subscription/{subscription}"
    return [
        web.get(TOPIC + "/subscriptions", list_subscriptions),
        web.put(sub, create_subscription),
        web.delete(sub, delete_subscription),
        web.post(sub + "/skip_all", skip_all),
        web.post(sub + "/resetcursor/{timestamp}", reset_by_time),
        web.post(sub + "/resetcursor", reset_by_message_id),
        web.post(sub + "/expireMessages/{seconds}", expire),
        web.post(TOPIC + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions),
    ]
