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


def test_http_service_urls_look_up_over_http() -> None:
    parsed = ServiceUrl.parse("http://a:8080,b/")
    assert parsed.http
    assert parsed.addresses == (Address("a", 8080), Address("b", 8080))
    assert not ServiceUrl.parse("pulsar://a").http
    with pytest.raises(InvalidUrl):
        parse_address("http://a:8080")  # a lookup answer names a binary address


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h:1",
        "http://",
        "pulsar://",
        "pulsar://h:x",
        "pulsar://h:0",
        "pulsar://h:1/path",
        "h:1",
    ],
)
def test_bad_service_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidUrl):
        ServiceUrl.parse(url)


def test_tls_urls_ask_for_tls_with_their_default_ports() -> None:
    # Issue #15: TLS is supported now; the URL's scheme decides, never a silent downgrade.
    assert ServiceUrl.parse("pulsar+ssl://h") == ServiceUrl((Address("h", 6651),), tls=True)
    assert ServiceUrl.parse("https://h:1,g") == ServiceUrl(
        (Address("h", 1), Address("g", 8443)), http=True, tls=True
    )
    assert ServiceUrl.parse("pulsar://h").tls is False
    assert parse_address("pulsar+ssl://h:7") == Address("h", 7)


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
