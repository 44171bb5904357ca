"""Issue #16: the ``idempotencyWindow`` policy over REST, namespace and topic level, resolved
field by field (topic > namespace > broker settings) and applied to loaded topics at once."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

import client as magnetar
from tests.helpers import BrokerThread, topic_stats

pytestmark = [pytest.mark.integration]

NAMESPACE_PATH = "/admin/v2/namespaces/public/default/idempotencyWindow"


def call(broker: BrokerThread, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.http + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read()
            return reply.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def window_stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    stats: dict[str, Any] = topic_stats(broker.http, topic)["idempotency"]
    return stats


def test_policies_resolve_per_field_and_apply_to_loaded_topics(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/idem-admin-{uuid.uuid4().hex[:8]}"
    topic_path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    client = magnetar.Client(broker.url)
    try:
        producer = client.create_producer(topic)
        producer.send(b"a", idempotency_key="a")
        assert window_stats(broker, topic)["maxKeys"] == 100_000  # the broker setting
        assert call(broker, "GET", NAMESPACE_PATH) == (200, None)

        assert call(broker, "POST", NAMESPACE_PATH, {"idempotencyWindowMaxKeys": 1})[0] == 204
        assert (
            call(
                broker, "POST", topic_path + "/idempotencyWindow", {"idempotencyWindowSeconds": 30}
            )[0]
            == 204
        )
        assert call(broker, "GET", NAMESPACE_PATH) == (200, {"idempotencyWindowMaxKeys": 1})
        assert call(broker, "GET", topic_path + "/idempotencyWindow") == (
            200,
            {"idempotencyWindowSeconds": 30},
        )
        stats = window_stats(broker, topic)
        assert (stats["windowSeconds"], stats["maxKeys"]) == (30, 1)
        producer.send(b"b", idempotency_key="b")  # max 1 key: "a" leaves
        assert window_stats(broker, topic)["keys"] == 1
        first_a = topic_stats(broker.http, topic)["msgInCounter"]
        producer.send(b"a again", idempotency_key="a")
        assert topic_stats(broker.http, topic)["msgInCounter"] == first_a + 1

        # Window 0 at the topic: keys are not checked.
        assert (
            call(
                broker, "POST", topic_path + "/idempotencyWindow", {"idempotencyWindowSeconds": 0}
            )[0]
            == 204
        )
        producer.send(b"a thrice", idempotency_key="a")
        assert topic_stats(broker.http, topic)["msgInCounter"] == first_a + 2

        assert call(broker, "DELETE", topic_path + "/idempotencyWindow")[0] == 204
        assert call(broker, "DELETE", NAMESPACE_PATH)[0] == 204
        stats = window_stats(broker, topic)
        assert (stats["windowSeconds"], stats["maxKeys"], stats["enabled"]) == (120, 100_000, True)
    finally:
        client.close()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"idempotencyWindowSeconds": -1},
        {"idempotencyWindowMaxKeys": 0},
        {"idempotencyWindowSeconds": True},
        {"windowSeconds": 5},
        [1],
    ],
)
def test_invalid_policies_are_refused(broker: BrokerThread, body: Any) -> None:
    status, reply = call(broker, "POST", NAMESPACE_PATH, body)
    assert status == 400
    assert "reason" in reply
    assert call(broker, "GET", NAMESPACE_PATH) == (200, None)


def test_unknown_namespace_is_404(broker: BrokerThread) -> None:
    status, _ = call(
        broker,
        "POST",
        "/admin/v2/namespaces/public/nope/idempotencyWindow",
        {"idempotencyWindowMaxKeys": 5},
    )
    assert status == 404
