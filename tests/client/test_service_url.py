"""``client.service_url`` and ``client.backoff``."""

from __future__ import annotations

import random

import pytest

from client.backoff import Backoff
from client.errors import InvalidUrl
from client.service_url import Address, ServiceUrl, parse_address


def test_service_urls_with_one_or_several_hosts() -> None:
    assert ServiceUrl.parse("pulsar://localhost:6650").addresses == (Address("localhost", 6650),)
    assert ServiceUrl.parse("pulsar://a:1,b:2/").addresses == (Address("a", 1), Address("b", 2))
    assert ServiceUrl.parse("pulsar://h").addresses == (Address("h", 6650),)
    assert ServiceUrl.parse("pulsar://[::1]:7000").addresses == (Address("::1", 7000),)
    assert parse_address("pulsar://b:6651").url == "pulsar://b:6651"


@pytest.mark.parametrize(
    "url", ["http://h:1", "pulsar://", "pulsar://h:x", "pulsar://h:0", "pulsar://h:1/path", "h:1"]
)
def test_bad_service_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidUrl):
        ServiceUrl.parse(url)


def test_tls_is_refused_rather_than_downgraded() -> None:
    with pytest.raises(InvalidUrl, match="TLS"):
        ServiceUrl.parse("pulsar+ssl://h:6651")


def test_a_lookup_answer_must_name_one_broker() -> None:
    with pytest.raises(InvalidUrl):
        parse_address("pulsar://a:1,b:2")


def test_backoff_doubles_up_to_the_maximum_with_jitter_and_resets() -> None:
    backoff = Backoff(0.1, 0.5, rng=random.Random(1))
    delays = [backoff.next() for _ in range(6)]
    for delay, nominal in zip(delays, [0.1, 0.2, 0.4, 0.5, 0.5, 0.5], strict=True):
        assert nominal * 0.9 <= delay <= nominal
    backoff.reset()
    assert backoff.next() <= 0.1
    with pytest.raises(ValueError):
        Backoff(0, 1)
