"""Connection caps: Pulsar's ``brokerMaxConnections`` and ``brokerMaxConnectionsPerIp``.

The rules are those of Pulsar's ``ConnectionController.DefaultConnectionController``:

1. 0 means unlimited; with both caps at 0 nothing is counted at all.
2. Every accepted TCP connection is counted, in total and for its IP address, *before* the caps
   are checked, and stays counted until it closes, refused or not: a refused connection still
   holds its socket until the close completes, so it still costs a file descriptor.
3. The total cap is checked first; the refused connection gets ``ERROR(NotAllowedError)`` and is
   closed at once (``broker.connection.core``), before it can send anything.
4. Only IP peers are counted (a Unix-socket peer has no address to cap).

Pure bookkeeping, no I/O: ``ServerConnection.connection_made`` asks ``admit`` and
``connection_lost`` calls ``release`` for every admitted-or-refused connection.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["ConnectionLimiter"]

# Pulsar's texts (ServerCnx.channelActive), so operators recognise them.
TOTAL_CAP_REACHED = "Reached the maximum number of connections"
IP_CAP_REACHED = "Reached the maximum number of connections on address"


class ConnectionLimiter:
    """Counts open connections in total and per IP address against the configured caps."""

    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        self._max_total = max_connections
        self._max_per_ip = max_connections_per_ip
        self._total = 0
        self._per_ip: Counter[str] = Counter()

    @property
    def enabled(self) -> bool:
        return self._max_total > 0 or self._max_per_ip > 0

    @property
    def open_connections(self) -> int:
        """Connections counted now (0 when no cap is set: nothing is counted then)."""
        return self._total

    def connections_from(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def admit(self, ip: str | None) -> str | None:
        """Count a new connection from ``ip``; the refusal text if it is over a cap, else None.

        Every call that returns with ``ip`` counted must be matched by one ``release(ip)``,
        whatever the answer was (rule 2). Returns None without counting when nothing is capped
        or the peer has no IP address.
        """
        if not self.enabled or ip is None:
            return None
        self._total += 1
        self._per_ip[ip] += 1
        if 0 < self._max_total < self._total:
            return TOTAL_CAP_REACHED
        if 0 < self._max_per_ip < self._per_ip[ip]:
            return f"{IP_CAP_REACHED} {ip}"
        return None

    def release(self, ip: str | None) -> None:
        """A connection counted by ``admit(ip)`` has closed."""
        if not self.enabled or ip is None:
            return
        self._total -= 1
        left = self._per_ip[ip] - 1
        if left > 0:
            self._per_ip[ip] = left
        else:
            # Forget the address: a scan of many source addresses must not grow this map.
            del self._per_ip[ip]
