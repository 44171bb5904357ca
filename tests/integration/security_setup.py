"""A broker with TLS on both ports, token + basic + TLS authentication and authorization on,
and the tenant ``acme`` / namespace ``acme/ns`` set up the way Pulsar's client tests set theirs
up (``PUT`` bodies carrying ``adminRoles`` and ``auth_policies.namespace_auth``)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from passlib.hash import apr_md5_crypt, bcrypt

from broker.auth.token import create_secret_key, create_token
from tests.helpers import BrokerThread, broker_config
from tests.pki import CertFiles, Pki

PULSAR = "org.apache.pulsar.broker.authentication."
SUPERUSER, TENANT_ADMIN, PRODUCER, CONSUMER = "admin", "tenant-admin", "producer", "consumer"
ANONYMOUS = "anonymous"
NAMESPACE = "acme/ns"
BASIC_USERS = {"bcrypt-user": "bcrypt-pass", "apr-user": "apr-pass"}
GRANTS = {
    PRODUCER: ["produce"],
    CONSUMER: ["consume"],
    "bcrypt-user": ["consume", "produce"],
    "apr-user": ["consume", "produce"],
    "tls-client": ["consume", "produce"],
}


@dataclass
class SecureBroker:
    broker: BrokerThread
    pki: Pki
    server: CertFiles
    secret: bytes
    clients: dict[str, CertFiles] = field(default_factory=dict)

    def token(self, role: str, expires_in: float | None = None) -> str:
        return create_token(self.secret, role, expires_in=expires_in)

    @property
    def url(self) -> str:
        return self.broker.url

    @property
    def tls_url(self) -> str:
        assert self.broker.broker is not None
        return f"pulsar+ssl://localhost:{self.broker.broker.tls_port}"

    @property
    def https(self) -> str:
        assert self.broker.broker is not None
        return f"https://localhost:{self.broker.broker.web_tls_port}"

    def ssl_context(self, client: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_file))
        if client is not None:
            files = self.clients[client]
            context.load_cert_chain(files.cert, files.key)
        return context

    def http(
        self,
        method: str,
        path: str,
        *,
        role: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        base: str | None = None,
        context: ssl.SSLContext | None = None,
    ) -> tuple[int, Any]:
        """One admin request as ``role`` (a token; None sends no credentials)."""
        sent = dict(headers or {})
        if role is not None:
            sent["Authorization"] = f"Bearer {self.token(role)}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(
            (base or self.broker.http) + path, data=data, method=method, headers=sent
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as reply:
                return reply.status, _body(reply.headers.get_content_type(), reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _body(exc.headers.get_content_type(), exc.read())


def _body(content_type: str, data: bytes) -> Any:
    if content_type == "application/json" and data.strip():
        return json.loads(data)
    return data.decode(errors="replace") or None


def htpasswd() -> str:
    return (
        f"bcrypt-user:{bcrypt.using(rounds=4).hash(BASIC_USERS['bcrypt-user'])}\n"
        f"apr-user:{apr_md5_crypt.hash(BASIC_USERS['apr-user'])}\n"
        "plain-user:plain-pass\n"
    )


def start_secure_broker(directory: Path, **overrides: Any) -> SecureBroker:
    pki = Pki(directory / "pki")
    server = pki.server()
    secret = create_secret_key()
    (directory / "secret.key").write_bytes(secret)
    htpasswd_file = directory / "htpasswd"
    htpasswd_file.write_text(htpasswd())
    settings: dict[str, Any] = {
        "broker_service_port_tls": 0,
        "web_service_port_tls": 0,
        "tls_certificate_file_path": str(server.cert),
        "tls_key_file_path": str(server.key),
        "tls_trust_certs_file_path": str(pki.ca_file),
        "authentication_enabled": True,
        "authentication_providers": ",".join(
            PULSAR + f"AuthenticationProvider{kind}" for kind in ("Token", "Basic", "Tls")
        ),
        "token_secret_key": f"file://{directory / 'secret.key'}",
        "basic_auth_conf": "data:;base64," + base64.b64encode(htpasswd().encode()).decode(),
        "anonymous_user_role": ANONYMOUS,
        "authorization_enabled": True,
        "super_user_roles": f"{SUPERUSER},superUser",
        "authentication_failure_delay_ms": 20,
        "advertised_address": "localhost",
    }
    settings.update(overrides)
    broker = BrokerThread(broker_config(directory / "data", **settings)).start()
    secure = SecureBroker(broker, pki, server, secret)
    secure.clients = {"tls-client": pki.client("tls-client"), SUPERUSER: pki.client(SUPERUSER)}
    return secure


def set_up_acme(secure: SecureBroker) -> None:
    """Tenant ``acme`` (admin: tenant-admin) and ``acme/ns`` with ``GRANTS``, as superuser."""
    status, _ = secure.http(
        "PUT",
        "/admin/v2/tenants/acme",
        role=SUPERUSER,
        body={"adminRoles": [TENANT_ADMIN], "allowedClusters": ["standalone"]},
    )
    assert status == 204, status
    status, _ = secure.http(
        "PUT",
        f"/admin/v2/namespaces/{NAMESPACE}",
        role=SUPERUSER,
        body={"auth_policies": {"namespace_auth": GRANTS}},
    )
    assert status == 204, status
