"""Where etcd is and how to reach it: ``metadataStoreUrl`` and ``metadataStoreConfigPath``.

``metadataStoreUrl`` is Pulsar's ``etcd:http://h1:2379,http://h2:2379`` (``https://`` once TLS
is on). ``metadataStoreConfigPath`` names the file Pulsar's etcd metadata store reads into its
``EtcdConfig``: ``useTls``, ``tlsProvider``, ``tlsTrustCertsFilePath``, ``tlsKeyFilePath``,
``tlsCertificateFilePath``, ``authority``. Pulsar has no etcd credentials there; Magnetar adds
``user`` and ``password`` (the names of jetcd's builder and of ``etcdctl --user``), exchanged for
a token at connect time (etcd's authentication).

Pulsar's code parses the file as YAML (``useTls: true``) while its documentation shows
properties (``useTls=true``); both forms are accepted, one flat key per line, ``#`` comments.
An unknown key is refused (Jackson's default), so a misspelt ``useTLS`` cannot leave TLS off
silently. ``tlsProvider`` (Java's JDK / OPENSSL choice) is accepted and has no effect: gRPC
Python always uses its bundled BoringSSL.

Mismatches are refused before anything connects: an ``https://`` endpoint without ``useTls``,
an ``http://`` one with it, a client key without its certificate, an unreadable file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from broker.config import ConfigError

ETCD_SCHEME = "etcd:"
URL_KEY = "metadataStoreUrl"
FILE_KEY = "metadataStoreConfigPath"

#: file key -> EtcdOptions attribute
_KEYS = {
    "useTls": "use_tls",
    "tlsProvider": "tls_provider",
    "tlsTrustCertsFilePath": "trust_certs_file",
    "tlsKeyFilePath": "key_file",
    "tlsCertificateFilePath": "cert_file",
    "authority": "authority",
    "user": "user",
    "password": "password",
}
_PROVIDERS = ("", "JDK", "OPENSSL", "OPENSSL_REFCNT")


class MetadataStoreUrlError(ConfigError):
    """``metadataStoreUrl`` is not ``etcd:http[s]://host:port[,...]`` as the options require."""

    def __init__(self, message: str) -> None:
        super().__init__(message, key=URL_KEY)


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class EtcdOptions:
    """The content of ``metadataStoreConfigPath`` (all off / empty without a file)."""

    use_tls: bool = False
    tls_provider: str = ""
    trust_certs_file: str = ""
    key_file: str = ""
    cert_file: str = ""
    authority: str = ""
    user: str = ""
    password: str = ""

    def tls_material(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(trusted CAs, client key, client certificate) as PEM bytes; None where not set
        (no CA file: the system's roots; no key: no client certificate)."""
        return (
            _read(self.trust_certs_file, "tlsTrustCertsFilePath"),
            _read(self.key_file, "tlsKeyFilePath"),
            _read(self.cert_file, "tlsCertificateFilePath"),
        )


def load_etcd_options(path: str) -> EtcdOptions:
    """The options in the file at ``path`` (``""``: none, plain text without credentials)."""
    if not path:
        return EtcdOptions()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{FILE_KEY} {path!r}: {exc.strerror}", key=FILE_KEY) from exc
    values: dict[str, str | bool] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line == "---":
            continue
        name, value = _split(line, f"{FILE_KEY} {path!r} line {number}")
        if name not in _KEYS:
            raise ConfigError(
                f"{FILE_KEY} {path!r} line {number}: unknown key {name!r} "
                f"(known: {', '.join(_KEYS)})",
                key=FILE_KEY,
            )
        values[_KEYS[name]] = _boolean(value, path, number) if name == "useTls" else value
    return _checked(EtcdOptions(**values), path)  # type: ignore[arg-type]


def parse_metadata_store_url(url: str, options: EtcdOptions | None = None) -> list[Endpoint]:
    """The etcd endpoints of ``etcd:http://h1:2379,http://h2:2379`` (Pulsar's syntax). With
    ``useTls`` the endpoints are ``https://`` (or scheme-less); without it ``http://``."""
    tls = options is not None and options.use_tls
    if not url.startswith(ETCD_SCHEME):
        raise MetadataStoreUrlError(f"{URL_KEY} {url!r}: only etcd: stores are supported")
    endpoints = []
    for part in url[len(ETCD_SCHEME) :].split(","):
        text = part.strip()
        split = urlsplit(text if "//" in text else f"{'https' if tls else 'http'}://{text}")
        if split.scheme not in ("http", "https") or not split.hostname:
            raise MetadataStoreUrlError(f"{URL_KEY} {url!r}: bad endpoint {part!r}")
        if split.scheme == "https" and not tls:
            raise MetadataStoreUrlError(
                f"{URL_KEY} {url!r}: an https endpoint needs TLS: set useTls: true (and "
                f"tlsTrustCertsFilePath) in the file named by {FILE_KEY}"
            )
        if split.scheme == "http" and tls:
            raise MetadataStoreUrlError(
                f"{URL_KEY} {url!r}: {FILE_KEY} sets useTls, so the endpoints must be https://"
            )
        endpoints.append(Endpoint(split.hostname, split.port or 2379, tls))
    return endpoints


def _split(line: str, where: str) -> tuple[str, str]:
    colon, equals = line.find(":"), line.find("=")
    cut = min(i for i in (colon, equals) if i >= 0) if max(colon, equals) >= 0 else -1
    if cut <= 0:
        raise ConfigError(f"{where}: expected 'key: value' or 'key=value'", key=FILE_KEY)
    value = line[cut + 1 :].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    elif " #" in value:  # a trailing comment, as YAML has them (not inside quotes)
        value = value.split(" #", 1)[0].rstrip()
    return line[:cut].strip(), value


def _boolean(value: str, path: str, number: int) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ConfigError(
            f"{FILE_KEY} {path!r} line {number}: useTls must be true or false, not {value!r}",
            key=FILE_KEY,
        )
    return lowered == "true"


def _checked(options: EtcdOptions, path: str) -> EtcdOptions:
    where = f"{FILE_KEY} {path!r}"
    if options.tls_provider.upper() not in _PROVIDERS:
        raise ConfigError(
            f"{where}: tlsProvider {options.tls_provider!r} is not one of JDK, OPENSSL",
            key=FILE_KEY,
        )
    if bool(options.key_file) != bool(options.cert_file):
        raise ConfigError(
            f"{where}: tlsKeyFilePath and tlsCertificateFilePath go together (mutual TLS)",
            key=FILE_KEY,
        )
    tls_files = options.trust_certs_file or options.key_file
    if tls_files and not options.use_tls:
        raise ConfigError(f"{where}: TLS files are set but useTls is not true", key=FILE_KEY)
    if bool(options.user) != bool(options.password):
        raise ConfigError(f"{where}: user and password go together", key=FILE_KEY)
    if options.use_tls:
        options.tls_material()  # unreadable files are refused now, not at the first connect
    return options


def _read(path: str, key: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{FILE_KEY}: {key} {path!r}: {exc.strerror}", key=FILE_KEY) from exc
