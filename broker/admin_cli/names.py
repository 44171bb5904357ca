"""Names from the command line into the admin API's paths, each part percent-encoded: a name
that click accepted but the broker cannot parse is a usage error (exit 2), not a request."""

from __future__ import annotations

from urllib.parse import quote

import click

from protocol.topic_name import InvalidTopicNameError, NamespaceName, TopicName

__all__ = [
    "namespace_path",
    "segment",
    "subscription_path",
    "topic_name",
    "topic_path",
]


def segment(text: str) -> str:
    """One path segment: a ``/`` in a name must not start another segment."""
    return quote(text, safe="")


def topic_name(value: str) -> str:
    """The full name of the topic ``value`` (``orders`` is persistent://public/default/orders)."""
    return _parse_topic(value).full_name


def topic_path(value: str) -> str:
    """``/admin/v2/persistent/<tenant>/<namespace>/<topic>``."""
    name = _parse_topic(value)
    parts = (name.tenant, name.namespace, name.local_name)
    return "/admin/v2/persistent/" + "/".join(segment(part) for part in parts)


def subscription_path(topic: str, subscription: str) -> str:
    return topic_path(topic) + "/subscription/" + segment(subscription)


def namespace_path(value: str) -> str:
    """``<tenant>/<namespace>``, what follows ``/admin/v2/namespaces/`` or ``persistent/``."""
    try:
        namespace = NamespaceName.parse(value)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from exc
    return f"{segment(namespace.tenant)}/{segment(namespace.namespace)}"


def _parse_topic(value: str) -> TopicName:
    try:
        return TopicName.parse(value)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from exc
