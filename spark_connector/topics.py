"""Topic names as the options give them: completed to full names (``x`` ->
``persistent://public/default/x``), with an ``OptionError`` naming a bad one. Pure code."""

from __future__ import annotations

from protocol.topic_name import InvalidTopicNameError, TopicName
from spark_connector.option_table import OptionError

__all__ = ["canonical_topic"]


def canonical_topic(name: str) -> str:
    """The full name of a topic (``x`` -> ``persistent://public/default/x``).

    Raises:
        OptionError: not a valid topic name.
    """
    try:
        return TopicName.parse(name.strip()).full_name
    except InvalidTopicNameError as exc:
        raise OptionError(f"invalid topic name {name!r}: {exc}") from None
