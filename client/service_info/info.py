"""``ServiceInfo`` and ``ServiceInfoProvider``: which cluster a client talks to (pulsar 3.13).

A ``ServiceInfo`` is one cluster's endpoint: its service URL and the credentials and trust
store for it. A ``ServiceInfoProvider`` hands the client its first ``ServiceInfo`` and may push
others later through the callback ``initialize`` receives; each one it pushes switches the
client (every connection closed, producers, consumers and readers reconnect to the new
cluster, see ``client.service_info.active``). ``AutoClusterFailover`` is the provider the
official package ships; an application may write its own (discovery, a configuration watch).
"""

from __future__ import annotations

from collections.abc import Callable

from client.arguments import check_type, check_type_or_none
from client.auth import Authentication
from client.service_url import ServiceUrl

__all__ = ["ServiceInfo", "ServiceInfoProvider", "ServiceInfoUpdate"]


class ServiceInfo:
    """Connection information for one Pulsar cluster (the official ``pulsar.ServiceInfo``).

    Args:
        service_url: the cluster's service URL (``pulsar://``, ``pulsar+ssl://``, ``http://``,
            ``https://``; several hosts separated by commas).
        authentication: the credentials for this cluster (None: none).
        tls_trust_certs_file_path: the CAs this cluster's certificates chain to (None: the
            system's).

    Raises:
        ValueError: an argument of the wrong type, or a malformed service URL (as the official).
    """

    __slots__ = ("_authentication", "_parsed", "_service_url", "_tls_trust_certs_file_path")

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        tls_trust_certs_file_path: str | None = None,
    ) -> None:
        check_type(str, service_url, "service_url")
        check_type_or_none(Authentication, authentication, "authentication")
        check_type_or_none(str, tls_trust_certs_file_path, "tls_trust_certs_file_path")
        # Parsed now, so a bad URL fails here (InvalidUrl is a ValueError), not at a switch.
        self._parsed = ServiceUrl.parse(service_url)
        self._service_url = service_url
        self._authentication = authentication
        self._tls_trust_certs_file_path = tls_trust_certs_file_path

    @property
    def service_url(self) -> str:
        return self._service_url

    @property
    def use_tls(self) -> bool:
        """Whether the URL asks for TLS (``pulsar+ssl://``, ``https://``)."""
        return self._parsed.tls

    @property
    def tls_trust_certs_file_path(self) -> str | None:
        return self._tls_trust_certs_file_path

    @property
    def authentication(self) -> Authentication | None:
        """The credentials for this cluster (not a property of the official class, which
        keeps them inside its C++ core)."""
        return self._authentication

    @property
    def parsed_url(self) -> ServiceUrl:
        """The service URL, parsed (hosts, lookup transport, TLS)."""
        return self._parsed

    def __repr__(self) -> str:
        return (
            f"ServiceInfo(service_url={self.service_url!r}, use_tls={self.use_tls!r}, "
            f"tls_trust_certs_file_path={self.tls_trust_certs_file_path!r})"
        )


ServiceInfoUpdate = Callable[[ServiceInfo], None]
"""The callback a provider calls with the cluster to switch to; callable from any thread."""


class ServiceInfoProvider:
    """Base class of service discovery and failover providers (the official
    ``pulsar.ServiceInfoProvider``).

    The client calls ``initial_service_info()`` once when it is created, then
    ``initialize(on_service_info_update)``; the provider may keep the callback and call it,
    from any thread, with the ``ServiceInfo`` to switch to. ``close()`` is called when the
    client closes (or shuts down): stop background work there, quickly (it runs on the
    client's event loop).
    """

    def initial_service_info(self) -> ServiceInfo:
        raise NotImplementedError

    def initialize(self, on_service_info_update: ServiceInfoUpdate) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work and release resources (nothing by default)."""
        return None
