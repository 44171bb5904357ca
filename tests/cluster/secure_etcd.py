"""A real etcd serving clients over mutual TLS with authentication on, and the
``metadataStoreConfigPath`` file a broker needs to reach it.

Certificates come from ``tests.pki``. Authentication: ``root`` (needed to turn it on) and a
least-privilege user ``magnetar`` with read-write on ``/magnetar/`` only, which the brokers use,
as an operator would set it up.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
from aetcd import rpc

from tests.cluster.conftest import Etcd, free_port, stop_process
from tests.helpers import wait_until
from tests.pki import CertFiles, Pki

USER, PASSWORD = "magnetar", "s3cret-etcd"
ROOT_PASSWORD = "root-pass"


@dataclass
class TlsEtcd(Etcd):
    pki: Pki
    server: CertFiles
    client: CertFiles
    args: list[str]
    log_path: Path

    @property
    def url(self) -> str:
        return f"etcd:https://127.0.0.1:{self.client_port}"

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.client_port}"

    def healthy(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca_file))
        context.load_cert_chain(self.client.cert, self.client.key)
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1, context=context) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def launch(self) -> None:
        """Start the process (again, on the same data and ports) and wait until it serves."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc
        try:
            wait_until(lambda: proc.poll() is not None or self.healthy(), 30)
        except AssertionError:
            pass  # reported below, with etcd's log
        if proc.poll() is not None or not self.healthy():
            proc.kill()
            raise RuntimeError(f"etcd did not start: {self.log_path.read_text()[-2000:]}")

    def restart(self) -> None:
        """Kill and start again: etcd forgets every authentication token it gave."""
        stop_process(self.proc)
        self.launch()

    def auth(self, method: str, request: Any, *, as_root: bool = True) -> None:
        """One call of etcd's Auth service over mutual TLS (as ``root`` once auth is on), as
        ``etcdctl user|role|auth ...`` would make it (Debian's etcd-server ships no etcdctl)."""
        credentials = grpc.ssl_channel_credentials(
            self.pki.ca_file.read_bytes(),
            self.client.key.read_bytes(),
            self.client.cert.read_bytes(),
        )
        with grpc.secure_channel(f"127.0.0.1:{self.client_port}", credentials) as channel:
            stub = rpc.AuthStub(channel)
            metadata = None
            if as_root:
                login = rpc.AuthenticateRequest(name="root", password=ROOT_PASSWORD)
                metadata = (("token", stub.Authenticate(login, timeout=10).token),)
            getattr(stub, method)(request, timeout=10, metadata=metadata)

    def options_file(
        self,
        path: Path,
        *,
        password: str = PASSWORD,
        ca: Path | None = None,
        client: CertFiles | None = None,
    ) -> Path:
        """A ``metadataStoreConfigPath`` file (YAML, as Pulsar's code reads it) for ``USER``."""
        path.write_text(
            "# etcd over mutual TLS, authenticated\n"
            "useTls: true\n"
            "tlsProvider: JDK\n"
            f"tlsTrustCertsFilePath: {ca or self.pki.ca_file}\n"
            f"tlsCertificateFilePath: {(client or self.client).cert}\n"
            f"tlsKeyFilePath: {(client or self.client).key}\n"
            f"user: {USER}\n"
            f'password: "{password}"\n'
        )
        return path


def start_tls_etcd(base: Path, token_ttl_seconds: int = 300) -> TlsEtcd:
    """etcd on loopback: clients over mutual TLS, authentication enabled (users above); an
    authentication token unused for ``token_ttl_seconds`` expires (etcd's default: 300)."""
    pki = Pki(base / "pki", name="etcd test CA")
    server = pki.server()
    client = pki.client("etcd-client")  # no etcd user of that name: the CN grants nothing
    client_port, peer_port = free_port(), free_port()
    endpoint = f"https://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    args = [
        shutil.which("etcd") or "/usr/bin/etcd",
        "--name=secure",
        f"--data-dir={base / 'data'}",
        f"--listen-client-urls={endpoint}",
        f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=secure={peer}",
        f"--cert-file={server.cert}",
        f"--key-file={server.key}",
        f"--trusted-ca-file={pki.ca_file}",
        "--client-cert-auth",
        f"--auth-token-ttl={token_ttl_seconds}",
    ]
    etcd = TlsEtcd(None, client_port, pki, server, client, args, base / "etcd.log")  # type: ignore[arg-type]
    etcd.launch()
    etcd.auth("UserAdd", rpc.AuthUserAddRequest(name="root", password=ROOT_PASSWORD), as_root=False)
    etcd.auth("RoleAdd", rpc.AuthRoleAddRequest(name="root"), as_root=False)
    etcd.auth(
        "UserGrantRole", rpc.AuthUserGrantRoleRequest(user="root", role="root"), as_root=False
    )
    etcd.auth("RoleAdd", rpc.AuthRoleAddRequest(name=USER), as_root=False)
    prefix = rpc.Permission(
        permType=rpc.Permission.READWRITE, key=b"/magnetar/", range_end=b"/magnetar0"
    )
    etcd.auth(
        "RoleGrantPermission",
        rpc.AuthRoleGrantPermissionRequest(name=USER, perm=prefix),
        as_root=False,
    )
    etcd.auth("UserAdd", rpc.AuthUserAddRequest(name=USER, password=PASSWORD), as_root=False)
    etcd.auth("UserGrantRole", rpc.AuthUserGrantRoleRequest(user=USER, role=USER), as_root=False)
    etcd.auth("AuthEnable", rpc.AuthEnableRequest(), as_root=False)
    return etcd
