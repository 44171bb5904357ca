"""Model test (Hypothesis): random keyed writes, deletes (empty values), unkeyed writes and
compactions; after every step a compacted reader reads exactly what the model says: the
compaction of the log up to the last compaction's horizon, then the log after it."""

from __future__ import annotations

import itertools
import json
import urllib.request

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import BrokerThread, close_client, new_client, wait_until
from tests.integration.test_compaction_crash import compacted_model

pytestmark = [pytest.mark.integration, pytest.mark.compat]

Op = tuple[str, str | None, bytes]
_topics = itertools.count()

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.sampled_from(["a", "b", "c", "d"]), st.binary(min_size=1, max_size=4)
        ),
        st.tuples(st.just("put"), st.none(), st.binary(min_size=1, max_size=4)),
        st.tuples(st.just("put"), st.sampled_from(["a", "b", "c", "d"]), st.just(b"")),
        st.tuples(st.just("compact"), st.none(), st.just(b"")),
    ),
    min_size=1,
    max_size=10,
)


def _compact(broker: BrokerThread, topic: str) -> None:
    url = f"{broker.http}/admin/v2/persistent/{topic.removeprefix('persistent://')}/compaction"
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10):
        pass

    def done() -> bool:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return bool(json.loads(reply.read())["status"] == "SUCCESS")

    wait_until(done)


def _read_compacted(client: pulsar.Client, topic: str) -> list[tuple[str | None, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    out = []
    while reader.has_message_available():
        message = reader.read_next(5000)
        out.append((message.partition_key() or None, message.data()))
    reader.close()
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=ops)
def test_compacted_reader_equals_the_model(broker: BrokerThread, steps: list[Op]) -> None:
    topic = f"persistent://public/default/compaction-model-{next(_topics)}"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        log: list[tuple[str | None, bytes]] = []
        horizon = 0
        for kind, key, value in steps:
            if kind == "compact":
                if log:
                    _compact(broker, topic)
                    horizon = len(log)
            else:
                if key is None:
                    producer.send(value)
                else:
                    producer.send(value, partition_key=key)
                log.append((key, value))
            expected = compacted_model(log[:horizon]) + log[horizon:]
            assert _read_compacted(client, topic) == expected
    finally:
        close_client(client)
