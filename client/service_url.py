"""Service URLs: ``pulsar://host:port[,host2:port2...][/]``.

The official clients accept a comma-separated host list and pick the next host when one cannot
be reached. Broker URLs handed back by lookups (``brokerServiceUrl``) have the same form with
one host. Only the plain-text scheme is supported; ``pulsar+ssl://`` is refused at once (an
application that asks for TLS must not silently get plain text).
"""

from __future__ import annotations

from dataclasses import dataclass

from client.errors import InvalidUrl

__all__ = ["DEFAULT_PORT", "Address", "ServiceUrl", "parse_address"]

DEFAULT_PORT = 6650
_SCHEME = "pulsar://"


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
    """The parsed service URL: the hosts to try, in order."""

    addresses: tuple[Address, ...]

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        """Parse ``pulsar://h1:p1,h2:p2/``.

        Raises:
            InvalidUrl: another scheme, no host, or a bad port.
        """
        if not isinstance(url, str) or not url.startswith(_SCHEME):
            if isinstance(url, str) and url.startswith("pulsar+ssl://"):
                raise InvalidUrl(f"TLS is not supported by this client yet: {url!r}")
            raise InvalidUrl(f"service URL must start with {_SCHEME!r}: {url!r}")
        hosts = url[len(_SCHEME) :].rstrip("/")
        if not hosts or "/" in hosts:
            raise InvalidUrl(f"bad service URL {url!r}")
        return cls(tuple(_parse_host_port(part, url) for part in hosts.split(",")))


def parse_address(url: str) -> Address:
    """Parse a one-host broker URL (as LOOKUP_RESPONSE carries).

    Raises:
        InvalidUrl: not a one-host ``pulsar://`` URL.
    """
    addresses = ServiceUrl.parse(url).addresses
    if len(addresses) != 1:
        raise InvalidUrl(f"expected one broker address: {url!r}")
    return addresses[0]


def _parse_host_port(part: str, url: str) -> Address:
    host, sep, port_text = part.strip().rpartition(":")
    if not sep:
        host, port_text = part.strip(), str(DEFAULT_PORT)
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
