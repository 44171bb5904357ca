"""Where a topic's files live: one folder per namespace and per topic under ``dataDir``.

The broker, the admin API and ``magnetar repair-topic`` all map names to folders through these
functions, so a name maps to the same folder everywhere.
"""

from __future__ import annotations

from pathlib import Path

from protocol.topic_name import (
    InvalidTopicNameError,
    NamespaceName,
    TopicName,
    folder_name,
    part_from_folder_name,
)


def namespace_directory(data_path: Path, namespace: NamespaceName) -> Path:
    """``<dataDir>/persistent/<tenant>/<ns>``, each part spelled by ``folder_name``."""
    return (
        data_path / "persistent" / folder_name(namespace.tenant) / folder_name(namespace.namespace)
    )


def topic_directory(data_path: Path, topic: TopicName) -> Path:
    """``<dataDir>/persistent/<tenant>/<ns>/<topic>``, each part spelled by ``folder_name``.

    A ``TopicName`` is validated when it is built (never ``.``/``..``, no separator, at most 255
    bytes per folder name), and ``folder_name`` is injective even on a case-insensitive file
    system, so this is one folder strictly inside the namespace folder, and no other topic's.
    """
    namespace = NamespaceName(topic.tenant, topic.namespace)
    return namespace_directory(data_path, namespace) / folder_name(topic.local_name)


def topic_stored_in(namespace: NamespaceName, folder: Path) -> TopicName | None:
    """The topic ``folder`` (a child of the namespace folder) holds, or None for anything
    ``topic_directory`` never creates: a stray file, another spelling, an invalid name."""
    local_name = part_from_folder_name(folder.name)
    if local_name is None or not folder.is_dir():
        return None
    try:
        return TopicName(namespace.tenant, namespace.namespace, local_name)
    except InvalidTopicNameError:
        return None
