"""Authentication on one binary connection: CONNECT, then AUTH_CHALLENGE / AUTH_RESPONSE.

As Pulsar's ``ServerCnx``:

1. With ``authenticationEnabled`` the CONNECT's ``auth_method_name`` and ``auth_data`` (plus
   the verified client certificate on a TLS port) give the connection its role before
   CONNECTED is sent. A refusal is ERROR ``AuthenticationError`` "Failed to authenticate",
   then close; the reason goes to the log (never the credentials), and the answer waits
   ``authenticationFailureDelayMs`` so guessing costs time (Magnetar's addition).
2. Every ``authenticationRefreshCheckSeconds`` an expired credential (a token's ``exp``) is
   challenged: AUTH_CHALLENGE with the method name and Pulsar's refresh marker. The client
   answers AUTH_RESPONSE with new credentials, which must name the same role; a client that
   does not support refresh, or has not answered by the next check, is disconnected.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.auth.identity import AuthenticationFailure, Identity
from broker.logging_setup import RateLimitedLog
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import Frame

if TYPE_CHECKING:
    from broker.connection.handle import ConnectionHandle

__all__ = ["REFRESH_AUTH_DATA", "ConnectionAuth"]

log = logging.getLogger(__name__)
_failure_log = RateLimitedLog(log, limit=10, interval=60.0)

#: Pulsar's ``AuthData.REFRESH_AUTH_DATA``: the challenge's data when credentials expired.
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
_FAILED = "Failed to authenticate"
T = pb.BaseCommand.Type


def peer_certificate(transport: Any) -> dict[str, Any] | None:
    """The client certificate the TLS handshake verified, None on plain text or without one."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    cert = ssl_object.getpeercert()
    return cert or None


class ConnectionAuth:
    """The role of one connection and the refresh of its credentials."""

    def __init__(self, conn: ConnectionHandle) -> None:
        self._conn = conn
        self._security = conn.service.security
        self._authn = self._security.authentication
        self.identity: Identity | None = None
        self._method = "none"
        self._supports_refresh = False
        self._challenge_pending = False
        self._server_version = ""
        self._protocol_version = 0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role(self) -> str | None:
        """The authenticated role; with authentication off, ``anonymousUserRole`` or None."""
        if self.identity is not None:
            return self.identity.role
        return self._authn.anonymous_role

    def handlers(self) -> dict[int, Callable[[Frame], None]]:
        return {T.AUTH_RESPONSE: self.on_auth_response}

    def on_connect(
        self, cmd: pb.CommandConnect, server_version: str, protocol_version: int
    ) -> bool:
        """Authenticate a CONNECT; False if refused (the refusal is under way)."""
        self._server_version, self._protocol_version = server_version, protocol_version
        if not self._authn.enabled:
            return True
        self._supports_refresh = cmd.feature_flags.supports_auth_refresh
        self._method = cmd.auth_method_name if cmd.HasField("auth_method_name") else "none"
        try:
            identity = self._authn.authenticate(
                self._method, cmd.auth_data, peer_certificate(self._conn.transport)
            )
        except AuthenticationFailure as failure:
            self._refuse(failure)
            return False
        self.identity = identity
        if identity is not None and identity.expires_at is not None:
            self._schedule_refresh_check()
        return True

    def _refuse(self, failure: AuthenticationFailure) -> None:
        _failure_log.log(
            logging.WARNING,
            self._conn.peer,
            "authentication of %s failed (method %r): %s",
            self._conn.peer,
            self._method,
            failure.reason,
        )
        self._conn.refuse_after(
            self._authn.failure_delay,
            commands.error(-1, ServerError.AuthenticationError, _FAILED),
        )

    # -- refresh --------------------------------------------------------------------------------

    def _schedule_refresh_check(self) -> None:
        self._timer = self._conn.loop.call_later(
            self._authn.refresh_check_seconds, self._refresh_check
        )

    def connection_lost(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _refresh_check(self) -> None:
        identity = self.identity
        if self._conn.closing or identity is None:
            return
        if not identity.expired():
            self._schedule_refresh_check()
            return
        if not self._supports_refresh:
            log.info("closing %s: its credentials expired and it cannot refresh", self._conn.peer)
            self._conn.close()
            return
        if self._challenge_pending:
            log.info("closing %s: no answer to the authentication challenge", self._conn.peer)
            self._conn.close()
            return
        self._challenge_pending = True
        self._conn.write(
            commands.auth_challenge(
                self._server_version,
                self._method,
                REFRESH_AUTH_DATA,
                protocol_version=self._protocol_version,
            )
        )
        self._schedule_refresh_check()

    def on_auth_response(self, frame: Frame) -> None:
        cmd = frame.command.authResponse
        self._challenge_pending = False
        current = self.identity
        if current is None or not cmd.HasField("response"):
            self._conn.close()
            return
        try:
            renewed = self._authn.authenticate(
                self._method, cmd.response.auth_data, peer_certificate(self._conn.transport)
            )
        except AuthenticationFailure as failure:
            self._refuse(failure)
            return
        if renewed is None or renewed.role != current.role:
            log.warning(
                "closing %s: its role changed on an authentication refresh", self._conn.peer
            )
            self._conn.close()
            return
        self.identity = renewed
        log.info("refreshed the credentials of role %r on %s", renewed.role, self._conn.peer)
