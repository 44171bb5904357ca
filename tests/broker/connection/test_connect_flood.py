"""A CONNECT flood against basic authentication (issue #24): after a refused CONNECT nothing
buffered behind it is read, a second CONNECT is a protocol error, password checks run off the
event loop on a bounded pool, and past its queue a CONNECT is refused at once, unchecked.

Real broker, real sockets, real bcrypt: ``start_secure_broker`` (tests/integration)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from passlib.hash import bcrypt

from broker.auth.check_pool import MAX_PENDING_CHECKS
from broker.auth.providers import AuthenticationService
from protocol import FrameDecoder, commands, pb
from protocol.errors import ServerError
from tests.integration.security_setup import SecureBroker, htpasswd, start_secure_broker
from tests.raw_client import RawConnection

T = pb.BaseCommand.Type
FLOOD = 31
SLOW_USER, SLOW_COST = "slow-user", 12  # ~0.2-0.3 s of CPU per check


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("flood")
    conf = directory / "flood-htpasswd"
    slow = bcrypt.using(rounds=SLOW_COST, ident="2y").hash("slow-pass")
    conf.write_text(htpasswd() + f"{SLOW_USER}:{slow}\n")
    running = start_secure_broker(
        directory, basic_auth_conf=str(conf), authentication_failure_delay_ms=1500
    )
    try:
        yield running
    finally:
        running.broker.stop()


def _authn(secure: SecureBroker) -> AuthenticationService:
    broker = secure.broker.broker
    assert broker is not None
    assert broker.service is not None
    return broker.service.security.authentication


def _basic_connect(user: str, password: str) -> bytes:
    return commands.connect(
        "flood",
        protocol_version=20,
        auth_method_name="basic",
        auth_data=f"{user}:{password}".encode(),
    )


def _read_until_closed(conn: RawConnection) -> list[int]:
    try:
        conn.read_until(lambda _frames: False, timeout=15)
    except ConnectionError:
        pass
    return [f.type for f in conn.frames]


def test_one_write_of_refused_connects_costs_one_check(secure: SecureBroker) -> None:
    authn = _authn(secure)
    failures, successes = authn.failures["basic"], authn.successes["basic"]
    with RawConnection(secure.broker.port) as conn:
        conn.send(_basic_connect("bcrypt-user", "wrong") * FLOOD)
        kinds = _read_until_closed(conn)
    assert kinds == [T.ERROR]
    assert ServerError(conn.frames[0].command.error.error) == ServerError.AuthenticationError
    assert authn.failures["basic"] - failures == 1  # not 31 guesses
    assert authn.successes["basic"] == successes


def test_a_second_connect_is_a_protocol_error(secure: SecureBroker) -> None:
    authn = _authn(secure)
    failures, successes = authn.failures["basic"], authn.successes["basic"]
    with RawConnection(secure.broker.port) as conn:
        good = _basic_connect("bcrypt-user", "bcrypt-pass")
        conn.send(good + _basic_connect("bcrypt-user", "wrong") * (FLOOD - 1))
        kinds = _read_until_closed(conn)
    assert kinds == [T.CONNECTED]  # then closed: nothing behind the first CONNECT checked
    assert authn.successes["basic"] - successes == 1
    assert authn.failures["basic"] == failures


def test_frames_behind_a_pooled_connect_are_served_after_it(secure: SecureBroker) -> None:
    with RawConnection(secure.broker.port) as conn:
        conn.send(_basic_connect("bcrypt-user", "bcrypt-pass") + commands.ping())
        conn.wait_for(T.PONG)
    assert [f.type for f in conn.frames] == [T.CONNECTED, T.PONG]


def _refusal_time(port: int, results: list[float], lock: threading.Lock) -> None:
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(_basic_connect(SLOW_USER, "wrong"))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            if not data:
                break
            decoder.feed(data)
            if any(f.type == T.ERROR for f in decoder):
                break
    with lock:
        results.append(time.monotonic() - start)


def test_checks_run_off_the_loop_and_past_the_queue_are_refused_at_once(
    secure: SecureBroker,
) -> None:
    attempts = MAX_PENDING_CHECKS + 6
    results: list[float] = []
    lock = threading.Lock()
    with RawConnection(secure.broker.port) as probe:
        probe.send(
            commands.connect(
                "probe",
                protocol_version=20,
                auth_method_name="token",
                auth_data=secure.token("admin").encode(),
            )
        )
        probe.wait_for(T.CONNECTED)
        threads = [
            threading.Thread(target=_refusal_time, args=(secure.broker.port, results, lock))
            for _ in range(attempts)
        ]
        for thread in threads:
            thread.start()
        # While ~16 bcrypt checks of cost 12 run, the loop answers a PING at once, every time.
        worst = 0.0
        pongs = 0
        while any(t.is_alive() for t in threads) and pongs < 50:
            sent = time.monotonic()
            probe.send(commands.ping())
            pongs += 1
            probe.wait_for(T.PONG, pongs)
            worst = max(worst, time.monotonic() - sent)
        for thread in threads:
            thread.join(30)
    assert len(results) == attempts
    assert worst < 0.15, f"a PING waited {worst * 1000:.0f} ms behind password checks"
    # Checked ones wait authenticationFailureDelayMs (1.5 s); the queue's overflow does not.
    quick = [r for r in results if r < 1.0]
    assert len(quick) >= attempts - MAX_PENDING_CHECKS, sorted(results)
