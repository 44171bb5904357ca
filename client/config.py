"""Client-wide settings, fixed when the client is created and shared by everything it opens."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from client.auth import Authentication
from client.backoff import Backoff

__all__ = ["CLIENT_VERSION", "ClientConfig"]

#: CONNECT.client_version (the official clients send e.g. "Pulsar-CPP-v4.2.0").
CLIENT_VERSION = "Magnetar-Python-0.1.0"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Timeouts and intervals, in seconds (the official API's names, unit converted).

    Attributes:
        operation_timeout: bound on lookups, producer creation and close (retries included).
        connection_timeout: bound on TCP connect plus the CONNECT/CONNECTED handshake.
        keep_alive_interval: PING period; a connection with no frame from the broker for a
            whole period is considered dead and closed.
        initial_backoff / max_backoff: reconnection and retry delays.
        listener_name: advertised listener sent with lookups (None: the default listener).
        partitions_update_interval: how often producers and consumers of a partitioned topic
            look for new partitions (the C++ client's default, 60 s); 0 never.
        authentication: credentials for CONNECT and HTTP lookups (``client/auth.py``).
        ssl_context: TLS for every connection and HTTP lookup (``client/tls.py``); None for
            plain text.
    """

    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    keep_alive_interval: float = 30.0
    initial_backoff: float = 0.1
    max_backoff: float = 60.0
    listener_name: str | None = None
    partitions_update_interval: float = 60.0
    authentication: Authentication | None = None
    ssl_context: ssl.SSLContext | None = None

    def new_backoff(self) -> Backoff:
        return Backoff(self.initial_backoff, self.max_backoff)
