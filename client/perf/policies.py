"""Setting the topics' deduplication policy through the admin REST API before a run.

``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/deduplicationEnabled`` with a JSON
boolean, as ``pulsar-admin topics set-deduplication`` does; it works on any broker with
Pulsar's admin API (topic-level policies enabled), and applies to topics not created yet.
"""

from __future__ import annotations

import json
import urllib.request

from protocol.topic_name import TopicName


def dedup_url(admin_url: str, topic: str) -> str:
    name = TopicName.parse(topic)
    return (
        f"{admin_url.rstrip('/')}/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/"
        f"{name.local_name}/deduplicationEnabled"
    )


def set_dedup(admin_url: str, topics: tuple[str, ...], enabled: bool, timeout: float = 10) -> None:
    """Enable or disable dedup on every topic (blocking; raises ``urllib.error.HTTPError``)."""
    body = json.dumps(enabled).encode()
    for topic in topics:
        request = urllib.request.Request(
            dedup_url(admin_url, topic),
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout):
            pass
