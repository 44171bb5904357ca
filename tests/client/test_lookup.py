"""``client.lookup`` and ``client.connection_pool`` against scripted brokers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from client.config import ClientConfig
from client.connection_pool import ConnectionPool
from client.errors import AlreadyClosed, LookupError, Timeout, TopicNotFound
from client.lookup import MAX_REDIRECTS, LookupService
from client.service_url import Address, ServiceUrl
from protocol import Frame, ServerError, commands, pb
from tests.client.stub_broker import StubBroker, StubConnection

T = pb.BaseCommand
CONFIG = ClientConfig(operation_timeout=2, initial_backoff=0.01, max_backoff=0.05)
TOPIC = "persistent://public/default/t"


def address_of(broker: StubBroker) -> Address:
    return Address("127.0.0.1", broker.port)


def lookup_answer(
    url: str,
    *,
    redirect: bool = False,
    authoritative: bool = True,
    proxy_through_service_url: bool = False,
) -> Callable[[StubConnection, Frame], None]:
    def answer(conn: StubConnection, frame: Frame) -> None:
        conn.write(
            commands.lookup_response(
                frame.command.lookupTopic.request_id,
                url,
                redirect=redirect,
                authoritative=authoritative,
                proxy_through_service_url=proxy_through_service_url,
            )
        )

    return answer


async def test_connect_answer_names_the_owner() -> None:
    async with StubBroker() as service, StubBroker() as owner:
        service.handlers[T.LOOKUP] = lookup_answer(owner.url)
        pool = ConnectionPool(CONFIG)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), CONFIG)
        result = await lookup.lookup(TOPIC)
        assert result.logical == result.physical == address_of(owner)
        request = service.of_type(T.LOOKUP)[0].command.lookupTopic
        assert (request.topic, request.authoritative) == (TOPIC, False)
        await pool.close()


async def test_redirects_are_followed_with_the_authoritative_flag() -> None:
    async with StubBroker() as service, StubBroker() as middle, StubBroker() as owner:
        service.handlers[T.LOOKUP] = lookup_answer(middle.url, redirect=True, authoritative=True)
        middle.handlers[T.LOOKUP] = lookup_answer(owner.url)
        pool = ConnectionPool(CONFIG)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), CONFIG)
        result = await lookup.lookup(TOPIC)
        assert result.logical == address_of(owner)
        assert middle.of_type(T.LOOKUP)[0].command.lookupTopic.authoritative
        await pool.close()


async def test_proxy_through_service_url_keeps_the_socket_on_the_service() -> None:
    async with StubBroker() as service:
        service.handlers[T.LOOKUP] = lookup_answer(
            "pulsar://owner.internal:6651", proxy_through_service_url=True
        )
        pool = ConnectionPool(CONFIG)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), CONFIG)
        result = await lookup.lookup(TOPIC)
        assert result.logical == Address("owner.internal", 6651)
        assert result.physical == address_of(service)
        connection = await pool.get(result.logical, result.physical)
        assert connection.physical == address_of(service)
        connects = [f.command.connect for f in service.of_type(T.CONNECT)]
        assert connects[-1].proxy_to_broker_url == "owner.internal:6651"
        assert len(pool.connections) == 2  # the lookup's and the proxied one
        await pool.close()


async def test_endless_redirects_end_in_a_lookup_error() -> None:
    async with StubBroker() as service:
        service.handlers[T.LOOKUP] = lookup_answer(service.url, redirect=True)
        pool = ConnectionPool(CONFIG)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), CONFIG)
        with pytest.raises(LookupError, match="redirects"):
            await lookup.lookup(TOPIC)
        assert len(service.of_type(T.LOOKUP)) == MAX_REDIRECTS
        await pool.close()


async def test_a_fatal_failure_is_raised_at_once_a_retriable_one_is_retried() -> None:
    async with StubBroker() as service:
        service.handlers[T.LOOKUP] = lambda conn, frame: conn.write(
            commands.lookup_response(
                frame.command.lookupTopic.request_id,
                error=ServerError.TopicNotFound,
                message="gone",
            )
        )
        pool = ConnectionPool(CONFIG)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), CONFIG)
        with pytest.raises(TopicNotFound, match="gone"):
            await lookup.lookup(TOPIC)
        assert len(service.of_type(T.LOOKUP)) == 1

        attempts: list[int] = []

        def busy_twice(conn: StubConnection, frame: Frame) -> None:
            attempts.append(1)
            request_id = frame.command.lookupTopic.request_id
            if len(attempts) <= 2:
                conn.write(
                    commands.lookup_response(
                        request_id, error=ServerError.ServiceNotReady, message="loading"
                    )
                )
            else:
                conn.write(commands.lookup_response(request_id, service.url))

        service.handlers[T.LOOKUP] = busy_twice
        assert (await lookup.lookup(TOPIC)).logical == address_of(service)
        assert len(attempts) == 3
        await pool.close()


async def test_retriable_failures_end_in_timeout_after_the_operation_timeout() -> None:
    async with StubBroker() as service:
        service.handlers[T.PARTITIONED_METADATA] = lambda conn, frame: conn.write(
            commands.partitioned_metadata_response(
                frame.command.partitionMetadata.request_id,
                error=ServerError.ServiceNotReady,
                message="not yet",
            )
        )
        config = ClientConfig(operation_timeout=0.2, initial_backoff=0.01, max_backoff=0.02)
        pool = ConnectionPool(config)
        lookup = LookupService(pool, ServiceUrl.parse(service.url), config)
        with pytest.raises(Timeout, match="not yet"):
            await lookup.partitioned_metadata(TOPIC)
        assert len(service.of_type(T.PARTITIONED_METADATA)) > 2
        await pool.close()


async def test_partitioned_metadata_and_the_next_host_when_one_is_down() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    async with StubBroker() as service:
        service.handlers[T.PARTITIONED_METADATA] = lambda conn, frame: conn.write(
            commands.partitioned_metadata_response(frame.command.partitionMetadata.request_id, 4)
        )
        pool = ConnectionPool(CONFIG)
        urls = ServiceUrl.parse(f"pulsar://127.0.0.1:{dead},127.0.0.1:{service.port}")
        lookup = LookupService(pool, urls, CONFIG)
        assert await lookup.partitioned_metadata(TOPIC) == 4
        assert lookup.service_address == address_of(service)
        await pool.close()


async def test_the_pool_shares_one_connection_and_replaces_a_closed_one() -> None:
    async with StubBroker() as broker:
        pool = ConnectionPool(CONFIG)
        address = address_of(broker)
        first, second = await asyncio.gather(pool.get(address), pool.get(address))
        assert first is second
        assert len(broker.connections) == 1  # concurrent callers waited for one handshake
        broker.connections[0].abort()
        await broker.wait_for(lambda: not first.is_ready)
        replacement = await pool.get(address)
        assert replacement is not first
        assert pool.connections == [replacement]
        await pool.close()
        assert pool.connections == []
        with pytest.raises(AlreadyClosed):
            await pool.get(address)
