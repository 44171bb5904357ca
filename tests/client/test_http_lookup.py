"""An ``http://`` service URL: topics are looked up over the broker's HTTP service (lookup,
partition count, namespace listing), then produced to and consumed from over the binary port;
an unreachable first host is skipped; HTTP errors map to the official exceptions."""

from __future__ import annotations

import re
import socket
import uuid

import pytest

from client import AsyncClient, Client, InitialPosition, MessageId
from client.errors import (
    AuthorizationError,
    LookupError,
    ServiceUnitNotReady,
    Timeout,
    TopicNotFound,
)
from client.http_lookup import _error
from tests.helpers import BrokerThread
from tests.integration.test_partitioned_topics import create_partitioned

pytestmark = [pytest.mark.integration]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_plain_and_partitioned_topics_and_patterns_over_an_http_service_url(
    running: BrokerThread,
) -> None:
    run = uuid.uuid4().hex[:8]
    plain = f"persistent://public/default/http-{run}"
    partitioned = create_partitioned(running.http, f"http-parts-{run}", 3)
    async with AsyncClient(running.http) as client:
        for topic in (plain, partitioned):
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(
                topic, "sub", initial_position=InitialPosition.Earliest
            )
            for index in range(6):
                await producer.send(b"%d" % index, partition_key=str(index))
            got = sorted([(await consumer.receive(5_000)).data() for _ in range(6)])
            assert got == [b"%d" % i for i in range(6)]
        pattern = await client.subscribe(
            re.compile(f"persistent://public/default/http-parts-{run}.*"),
            "pattern",
            initial_position=InitialPosition.Earliest,
        )
        assert len(pattern.topics()) == 3
        assert sorted([(await pattern.receive(5_000)).data() for _ in range(6)]) == got


def test_the_blocking_client_skips_an_unreachable_first_host(running: BrokerThread) -> None:
    port = running.http.rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{closed_port()},127.0.0.1:{port}"
    topic = f"http-fallback-{uuid.uuid4().hex[:8]}"
    with Client(url, operation_timeout_seconds=10) as client:
        producer = client.create_producer(topic)
        producer.send(b"x")
        reader = client.create_reader(topic, MessageId.earliest)
        assert reader.read_next(5_000).data() == b"x"


async def test_nothing_listening_ends_in_timeout_and_https_means_tls() -> None:
    async with AsyncClient(
        f"http://127.0.0.1:{closed_port()}", operation_timeout_seconds=1
    ) as client:
        with pytest.raises(Timeout):
            await client.create_producer("t")
        assert client.config.ssl_context is None
    # Issue #15: https:// is TLS now (tests/client/test_auth.py runs it against a broker).
    async with AsyncClient("https://127.0.0.1:8443") as client:
        assert client.config.ssl_context is not None


def test_http_statuses_map_to_the_official_exceptions() -> None:
    assert isinstance(_error(404, "x"), TopicNotFound)
    assert isinstance(_error(403, "x"), AuthorizationError)
    assert isinstance(_error(503, "x"), ServiceUnitNotReady)
    assert _error(503, "x").retriable
    assert isinstance(_error(412, "x"), LookupError)
    assert not _error(412, "x").retriable
