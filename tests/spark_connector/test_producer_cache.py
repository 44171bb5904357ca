"""producer_cache: leases, reuse by key, idle producers closed at the next lease (real broker)."""

from __future__ import annotations

from client.sync import Client, Producer
from spark_connector.producer_cache import ProducerCache
from tests.helpers import BrokerThread


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_leases_reuse_and_idle_close(broker: BrokerThread) -> None:
    client = Client(broker.url)
    clock = Clock()
    cache = ProducerCache(idle_seconds=10, clock=clock)
    made: list[Producer] = []

    def create(topic: str) -> Producer:
        made.append(client.create_producer(topic))
        return made[-1]

    try:
        first = cache.lease("a", lambda: create("cache-a"))
        second = cache.lease("a", lambda: create("cache-a"))
        assert first is not second  # leased: never shared by two tasks
        cache.give_back("a", first)
        cache.give_back("a", second)
        leased = cache.lease("a", lambda: create("cache-a"))
        assert leased in (first, second)
        assert len(made) == 2
        assert len(cache) == 1
        other = cache.lease("b", lambda: create("cache-b"))
        cache.give_back("b", other)
        clock.now = 11  # both idle past the limit: closed at the next lease
        cache.lease("c", lambda: create("cache-c"))
        assert len(cache) == 0
        assert not other.is_connected()
        leased.send(b"still usable")  # the one leased out was not touched
    finally:
        cache.close()
        client.close()
