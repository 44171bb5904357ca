"""ConnectionLimiter: Pulsar's brokerMaxConnections / brokerMaxConnectionsPerIp bookkeeping."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.connection.limits import IP_CAP_REACHED, TOTAL_CAP_REACHED, ConnectionLimiter


def test_zero_caps_admit_everything_and_count_nothing() -> None:
    limiter = ConnectionLimiter(0, 0)
    assert all(limiter.admit("10.0.0.1") is None for _ in range(10_000))
    assert limiter.open_connections == 0
    assert limiter.connections_from("10.0.0.1") == 0


def test_total_cap_refuses_the_connection_over_it_until_one_closes() -> None:
    limiter = ConnectionLimiter(3, 0)
    assert [limiter.admit(f"10.0.0.{i}") for i in range(3)] == [None, None, None]
    assert limiter.admit("10.0.0.9") == TOTAL_CAP_REACHED
    # The refused connection is counted until its own close (Pulsar), then the slot is free.
    limiter.release("10.0.0.9")
    assert limiter.admit("10.0.0.9") == TOTAL_CAP_REACHED
    limiter.release("10.0.0.9")
    limiter.release("10.0.0.0")
    assert limiter.admit("10.0.0.9") is None
    assert limiter.open_connections == 3


def test_per_ip_cap_is_separate_for_each_address() -> None:
    limiter = ConnectionLimiter(0, 2)
    assert limiter.admit("127.0.0.1") is None
    assert limiter.admit("127.0.0.1") is None
    assert limiter.admit("127.0.0.1") == f"{IP_CAP_REACHED} 127.0.0.1"
    assert limiter.admit("127.0.0.2") is None
    assert limiter.connections_from("127.0.0.1") == 3
    assert limiter.connections_from("127.0.0.2") == 1


def test_total_cap_is_checked_before_the_per_ip_cap() -> None:
    limiter = ConnectionLimiter(1, 1)
    assert limiter.admit("127.0.0.1") is None
    assert limiter.admit("127.0.0.1") == TOTAL_CAP_REACHED


def test_peers_without_an_ip_address_are_not_counted() -> None:
    limiter = ConnectionLimiter(1, 1)
    assert limiter.admit(None) is None
    assert limiter.admit(None) is None
    limiter.release(None)
    assert limiter.open_connections == 0


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"])), max_size=200))
def test_counts_return_to_zero_and_forget_addresses_after_every_close(
    steps: list[tuple[bool, str]],
) -> None:
    limiter = ConnectionLimiter(5, 2)
    open_from: list[str] = []
    for opening, ip in steps:
        if opening or not open_from:
            limiter.admit(ip)
            open_from.append(ip)
        else:
            limiter.release(open_from.pop())
        assert limiter.open_connections == len(open_from)
        assert limiter.connections_from(ip) == open_from.count(ip)
    for ip in reversed(open_from):
        limiter.release(ip)
    assert limiter.open_connections == 0
    assert not limiter._per_ip
