"""``metadataStoreConfigPath`` (Pulsar's etcd options file, plus user / password) and the
schemes ``metadataStoreUrl`` accepts with and without TLS: every mismatch refused up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cluster.etcd_config import (
    Endpoint,
    EtcdOptions,
    load_etcd_options,
    parse_metadata_store_url,
)
from broker.config import ConfigError
from tests.pki import Pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "etcd.yaml"
    path.write_text(text)
    return str(path)


def test_no_file_means_plain_text_without_credentials() -> None:
    assert load_etcd_options("") == EtcdOptions()
    assert parse_metadata_store_url("etcd:http://h1:2379,h2") == [
        Endpoint("h1", 2379, tls=False),
        Endpoint("h2", 2379, tls=False),
    ]


def test_the_yaml_form_pulsar_reads(tmp_path: Path, pki: Pki) -> None:
    client = pki.client("broker")
    options = load_etcd_options(
        write(
            tmp_path,
            "---\n# etcd of cluster c1\n"
            "useTls: true\n"
            "tlsProvider: OPENSSL\n"
            f"tlsTrustCertsFilePath: '{pki.ca_file}'\n"
            f"tlsCertificateFilePath: {client.cert}\n"
            f"tlsKeyFilePath: {client.key}  # mutual TLS\n"
            "authority: etcd.internal\n"
            "user: magnetar\n"
            'password: "p:w=d #1"\n',
        )
    )
    assert options == EtcdOptions(
        use_tls=True,
        tls_provider="OPENSSL",
        trust_certs_file=str(pki.ca_file),
        key_file=str(client.key),
        cert_file=str(client.cert),
        authority="etcd.internal",
        user="magnetar",
        password="p:w=d #1",
    )
    trusted, key, chain = options.tls_material()
    assert trusted == pki.ca_file.read_bytes()
    assert (key, chain) == (client.key.read_bytes(), client.cert.read_bytes())


def test_the_properties_form_of_pulsars_documentation(tmp_path: Path, pki: Pki) -> None:
    text = f"useTls=TRUE\ntlsProvider=JDK\ntlsTrustCertsFilePath={pki.ca_file}\nauthority=\n"
    options = load_etcd_options(write(tmp_path, text))
    assert options.use_tls
    assert options.trust_certs_file == str(pki.ca_file)
    assert options.tls_material() == (pki.ca_file.read_bytes(), None, None)
    assert parse_metadata_store_url("etcd:https://e1:2379,e2:2380", options) == [
        Endpoint("e1", 2379, tls=True),
        Endpoint("e2", 2380, tls=True),  # scheme-less endpoints follow useTls
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("useTLS: true\n", "unknown key 'useTLS'"),
        ("useTls: yes please\n", "useTls must be true or false"),
        ("just a line\n", "expected 'key: value' or 'key=value'"),
        ("useTls: true\ntlsKeyFilePath: /k.pem\n", "go together (mutual TLS)"),
        ("tlsTrustCertsFilePath: /ca.pem\n", "TLS files are set but useTls is not true"),
        ("user: magnetar\n", "user and password go together"),
        ("useTls: true\ntlsProvider: BORING\n", "tlsProvider 'BORING'"),
        ("useTls: true\ntlsTrustCertsFilePath: /nonexistent/ca.pem\n", "No such file"),
    ],
)
def test_a_bad_file_is_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="metadataStoreConfigPath") as caught:
        load_etcd_options(write(tmp_path, text))
    assert message in str(caught.value)
    assert caught.value.key == "metadataStoreConfigPath"


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_etcd_options(str(tmp_path / "absent.yaml"))


def test_https_needs_tls_and_tls_needs_https(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match="an https endpoint needs TLS: set useTls") as caught:
        parse_metadata_store_url("etcd:https://127.0.0.1:2379")
    assert caught.value.key == "metadataStoreUrl"
    tls = load_etcd_options(write(tmp_path, f"useTls: true\ntlsTrustCertsFilePath: {pki.ca_file}"))
    with pytest.raises(ConfigError, match="sets useTls, so the endpoints must be https://"):
        parse_metadata_store_url("etcd:https://a:2379,http://b:2379", tls)
    with pytest.raises(ConfigError, match="only etcd: stores are supported"):
        parse_metadata_store_url("zk:localhost:2181", tls)
