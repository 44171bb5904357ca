"""Service URLs: ``pulsar[+ssl]://host:port[,host2:port2...][/]`` or ``http[s]://host:port[,...]``.

The official clients accept a comma-separated host list and pick the next host when one cannot
be reached. Broker URLs handed back by lookups (``brokerServiceUrl``) have the same form with
one host. With ``http://`` the client looks topics up over the broker's HTTP service (as the
official clients do) and then connects to the binary port the answer names. ``pulsar+ssl://``
(default port 6651) and ``https://`` (8443) ask for TLS on every connection (``tls``).
"""

from __future__ import annotations

from dataclasses import dataclass

from client.errors import InvalidUrl

__all__ = ["DEFAULT_HTTP_PORT", "DEFAULT_PORT", "Address", "ServiceUrl", "parse_address"]

DEFAULT_PORT = 6650
DEFAULT_HTTP_PORT = 8080
_SCHEME = "pulsar://"
_HTTP_SCHEME = "http://"
#: scheme -> (uses HTTP lookups, TLS, default port)
_SCHEMES = {
    _SCHEME: (False, False, DEFAULT_PORT),
    "pulsar+ssl://": (False, True, 6651),
    _HTTP_SCHEME: (True, False, DEFAULT_HTTP_PORT),
    "https://": (True, True, 8443),
}


@dataclass(frozen=True, slots=True)
class Address:
    """One broker endpoint."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"{_SCHEME}{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        """``host:port``, the form CONNECT's ``proxy_to_broker_url`` takes."""
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """The parsed service URL: the hosts to try, in order, and whether lookups use HTTP."""

    addresses: tuple[Address, ...]
    http: bool = False
    tls: bool = False

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        """Parse ``pulsar[+ssl]://h1:p1,h2:p2/`` or ``http[s]://h1:p1,h2:p2/``.

        Raises:
            InvalidUrl: another scheme, no host, or a bad port.
        """
        scheme = next((s for s in _SCHEMES if isinstance(url, str) and url.startswith(s)), None)
        if scheme is None:
            raise InvalidUrl(f"service URL must start with one of {', '.join(_SCHEMES)}: {url!r}")
        http, tls, default_port = _SCHEMES[scheme]
        hosts = url[len(scheme) :].rstrip("/")
        if not hosts or "/" in hosts:
            raise InvalidUrl(f"bad service URL {url!r}")
        addresses = tuple(_parse_host_port(part, url, default_port) for part in hosts.split(","))
        return cls(addresses, http, tls)


def parse_address(url: str) -> Address:
    """Parse a one-host broker URL (as LOOKUP_RESPONSE carries).

    Raises:
        InvalidUrl: not a one-host ``pulsar://`` URL.
    """
    parsed = ServiceUrl.parse(url)
    addresses = parsed.addresses
    if len(addresses) != 1 or parsed.http:
        raise InvalidUrl(f"expected one broker address: {url!r}")
    return addresses[0]


def _parse_host_port(part: str, url: str, default_port: int) -> Address:
    host, sep, port_text = part.strip().rpartition(":")
    if not sep:
        host, port_text = part.strip(), str(default_port)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # IPv6 literal
    if not host:
        raise InvalidUrl(f"no host in service URL {url!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidUrl(f"bad port {port_text!r} in service URL {url!r}") from None
    if not 0 < port < 65536:
        raise InvalidUrl(f"bad port {port} in service URL {url!r}")
    return Address(host, port)
