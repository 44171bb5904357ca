"""magnetar-admin's HTTP side against a stand-in network (httpx.MockTransport): redirects keep
method and body, credentials stay with the admin URL's origin, failures carry their exit code."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from broker.admin_cli.http import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    MAX_REDIRECTS,
    RequestFailed,
    TlsOptions,
    new_client,
    request,
)
from tests.pki import Pki

ADMIN_URL = "http://127.0.0.1:8080"
TOKEN = "Bearer secret"
Handler = Callable[[httpx.Request], httpx.Response]


def client_over(handler: Handler, authorization: str | None = TOKEN) -> httpx.Client:
    return new_client(ADMIN_URL, authorization, TlsOptions(), httpx.MockTransport(handler))


class Recorder:
    """Answers a redirect to ``location`` at the first request, then 200 with ``answer``."""

    def __init__(self, status: int, location: str, answer: bytes = b"") -> None:
        self.status, self.location, self.answer = status, location, answer
        self.seen: list[httpx.Request] = []

    def __call__(self, sent: httpx.Request) -> httpx.Response:
        self.seen.append(sent)
        if len(self.seen) == 1:
            return httpx.Response(self.status, headers={"Location": self.location})
        return httpx.Response(200, content=self.answer)


def test_requests_send_json_with_the_credentials_under_the_admin_url() -> None:
    seen: list[httpx.Request] = []

    def answer(sent: httpx.Request) -> httpx.Response:
        seen.append(sent)
        return httpx.Response(200, json={"partitions": 4})

    with client_over(answer) as client:
        assert request(client, "PUT", "/admin/v2/persistent/a/b/c/partitions", 4) == {
            "partitions": 4
        }
    [sent] = seen
    assert str(sent.url) == ADMIN_URL + "/admin/v2/persistent/a/b/c/partitions"
    assert sent.content == b"4"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Accept"] == "application/json"
    assert sent.headers["Authorization"] == TOKEN


@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_within_the_origin_keeps_method_body_and_credentials(status: int) -> None:
    recorder = Recorder(status, "/owner/admin/v2/x")
    with client_over(recorder) as client:
        request(client, "POST", "/admin/v2/x", {"k": 1})
    followed = recorder.seen[1]
    assert str(followed.url) == ADMIN_URL + "/owner/admin/v2/x"
    assert followed.method == "POST"
    assert followed.content == b'{"k": 1}'
    assert followed.headers["Authorization"] == TOKEN


@pytest.mark.parametrize(
    "owner", ["http://127.0.0.1:8081/admin/v2/x", "http://broker-2:8080/admin/v2/x"]
)
def test_a_redirect_to_another_broker_keeps_method_and_body_not_the_credentials(
    owner: str,
) -> None:
    """Another port of the same host is another origin too: its broker was not given them."""
    recorder = Recorder(307, owner)
    with client_over(recorder) as client:
        request(client, "PUT", "/admin/v2/x", [1, 2])
    followed = recorder.seen[1]
    assert str(followed.url) == owner
    assert (followed.method, followed.content) == ("PUT", b"[1, 2]")
    assert "Authorization" not in followed.headers
    assert followed.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_become_a_get_is_refused(status: int) -> None:
    recorder = Recorder(status, "/elsewhere")
    with client_over(recorder) as client, pytest.raises(RequestFailed) as failed:
        request(client, "DELETE", "/admin/v2/x")
    assert len(recorder.seen) == 1
    assert failed.value.exit_code == EXIT_REFUSED
    assert str(failed.value).startswith(f"DELETE /admin/v2/x failed: HTTP {status}: ")


def test_redirects_end_after_the_fifth() -> None:
    seen: list[httpx.Request] = []

    def loop(sent: httpx.Request) -> httpx.Response:
        seen.append(sent)
        return httpx.Response(307, headers={"Location": "/admin/v2/x"})

    with client_over(loop) as client, pytest.raises(RequestFailed) as failed:
        request(client, "GET", "/admin/v2/x")
    assert len(seen) == MAX_REDIRECTS + 1
    assert failed.value.exit_code == EXIT_REFUSED
    assert str(failed.value) == "GET /admin/v2/x: more than 5 redirects"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (httpx.Response(409, json={"reason": "still has namespaces"}), "still has namespaces"),
        (httpx.Response(500, text=" plain words \n"), "plain words"),
        (httpx.Response(404), "Not Found"),
        (httpx.Response(403, content=b'["not", "a", "mapping"]'), '["not", "a", "mapping"]'),
    ],
)
def test_a_refusal_says_the_status_and_the_reason(answer: httpx.Response, reason: str) -> None:
    with client_over(lambda _: answer) as client, pytest.raises(RequestFailed) as failed:
        request(client, "GET", "/admin/v2/t")
    assert failed.value.exit_code == EXIT_REFUSED
    assert str(failed.value) == f"GET /admin/v2/t failed: HTTP {answer.status_code}: {reason}"


def test_an_unreachable_broker_is_exit_3_with_the_url() -> None:
    def refuse(sent: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=sent)

    with client_over(refuse) as client, pytest.raises(RequestFailed) as failed:
        request(client, "GET", "/admin/v2/tenants")
    assert failed.value.exit_code == EXIT_UNREACHABLE
    assert str(failed.value) == (
        f"cannot reach the broker at {ADMIN_URL}/admin/v2/tenants: [Errno 111] Connection refused"
    )


@pytest.mark.parametrize(
    ("content", "decoded"),
    [(b"", None), (b'["a", "b"]', ["a", "b"]), (b"true", True), (b"not json", "not json")],
)
def test_answers_are_decoded_json_or_text(content: bytes, decoded: object) -> None:
    with client_over(lambda _: httpx.Response(200, content=content), None) as client:
        assert request(client, "GET", "/admin/v2/x") == decoded


def test_tls_options_make_the_context(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    client = pki.client("admin")
    trusting = TlsOptions(str(pki.ca_file), cert_file=str(client.cert), key_file=str(client.key))
    context = trusting.context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    subjects = [cert["subject"] for cert in context.get_ca_certs()]
    assert ((("commonName", "Magnetar Test CA"),),) in subjects
    insecure = TlsOptions(allow_insecure=True).context()
    assert insecure.verify_mode == ssl.CERT_NONE
    assert not insecure.check_hostname


def test_tls_options_are_read_for_an_https_admin_url_only(tmp_path: Path) -> None:
    missing = TlsOptions(trust_cert_path=str(tmp_path / "missing.pem"))
    new_client("http://localhost:8080", None, missing).close()
    with pytest.raises(FileNotFoundError):
        new_client("https://localhost:8443", None, missing)
