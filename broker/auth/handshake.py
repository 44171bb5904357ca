"""Authentication on one binary connection: CONNECT, then AUTH_CHALLENGE / AUTH_RESPONSE.

As Pulsar's ``ServerCnx``:

1. With ``authenticationEnabled`` the CONNECT's ``auth_method_name`` and ``auth_data`` (plus
   the verified client certificate on a TLS port) give the connection its role before
   CONNECTED is sent. A refusal is ERROR ``AuthenticationError`` "Failed to authenticate",
   then close; the reason goes to the log (never the credentials), and the answer waits
   ``authenticationFailureDelayMs`` so guessing costs time (Magnetar's addition). The
   connection reads nothing more after a refusal (``ServerConnection`` drops what it had
   buffered), so one write of many CONNECTs buys one guess, not many.
2. A check that costs CPU (basic's bcrypt) runs on the bounded check pool: ``on_connect``
   answers ``PENDING`` and the connection waits, reading nothing, until ``connect_finished``.
   When the pool's queue is full the CONNECT is refused unchecked, without the delay.
3. Proxies (``proxyRoles``): with authorization on, a proxy role must name the client in
   ``original_principal`` and no other role may (ERROR ``AuthorizationError`` "Invalid roles.",
   then close); every permission check then covers both roles. With
   ``authenticateOriginalAuthData`` the forwarded ``original_auth_data`` is authenticated with
   the provider of ``original_auth_method`` (no such provider: ``anonymousUserRole``) and the
   principal is the role it names.
4. Every ``authenticationRefreshCheckSeconds`` an expired credential (a token's ``exp``) is
   challenged: AUTH_CHALLENGE with the method name and Pulsar's refresh marker. The client
   answers AUTH_RESPONSE with new credentials, which must name the same role; a client that
   does not support refresh, or has not answered by the next check, is disconnected. Behind a
   proxy the credential refreshed is the client's when it was authenticated; a proxy's own
   expired credential, with the client's name only trusted, closes the connection.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.auth.check_pool import CheckQueueFull
from broker.auth.identity import AuthenticationFailure, Identity
from broker.logging_setup import RateLimitedLog
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import Frame

if TYPE_CHECKING:
    from broker.connection.handle import ConnectionHandle

__all__ = ["REFRESH_AUTH_DATA", "ConnectOutcome", "ConnectionAuth"]

log = logging.getLogger(__name__)
_failure_log = RateLimitedLog(log, limit=10, interval=60.0)

#: Pulsar's ``AuthData.REFRESH_AUTH_DATA``: the challenge's data when credentials expired.
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
_FAILED = "Failed to authenticate"
_INVALID_ROLES = "Invalid roles."
T = pb.BaseCommand.Type


class ConnectOutcome(enum.Enum):
    ACCEPTED = "accepted"  # send CONNECTED now
    REFUSED = "refused"  # an error and a close are under way; read nothing more
    PENDING = "pending"  # a pooled check runs; the connection hears from connect_finished


def peer_certificate(transport: Any) -> dict[str, Any] | None:
    """The client certificate the TLS handshake verified, None on plain text or without one."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    cert = ssl_object.getpeercert()
    return cert or None


class ConnectionAuth:
    """The role of one connection (and a proxy's original principal), and their refresh."""

    def __init__(self, conn: ConnectionHandle) -> None:
        self._conn = conn
        self._security = conn.service.security
        self._authn = self._security.authentication
        self._authorizer = self._security.authorizer
        self.identity: Identity | None = None
        #: The client a proxy connects for (CONNECT ``original_principal``), else None.
        self.original_principal: str | None = None
        self._original_identity: Identity | None = None  # authenticateOriginalAuthData
        self._method = "none"
        self._original_method = "none"
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

    # -- CONNECT --------------------------------------------------------------------------------

    def on_connect(
        self, cmd: pb.CommandConnect, server_version: str, protocol_version: int
    ) -> ConnectOutcome:
        """Authenticate a CONNECT: accepted, refused (the refusal is under way) or pending."""
        self._server_version, self._protocol_version = server_version, protocol_version
        if not self._authn.enabled:
            return ConnectOutcome.ACCEPTED
        self._supports_refresh = cmd.feature_flags.supports_auth_refresh
        self._method = cmd.auth_method_name if cmd.HasField("auth_method_name") else "none"
        authenticate_original = cmd.HasField("original_principal") and (
            self._conn.service.config.authenticate_original_auth_data
        )
        if authenticate_original:
            self._original_method = cmd.original_auth_method or "none"
        if self._authn.is_blocking(self._method) or (
            authenticate_original and self._authn.is_blocking(self._original_method)
        ):
            self._conn.spawn(self._connect_on_pool(cmd, authenticate_original))
            return ConnectOutcome.PENDING
        try:
            identity = self._authn.authenticate(self._method, cmd.auth_data, self._peer_cert())
            original = None
            if authenticate_original:
                original = self._authn.authenticate(
                    self._original_method, cmd.original_auth_data.encode(), None
                )
        except AuthenticationFailure as failure:
            self._refuse(failure)
            return ConnectOutcome.REFUSED
        return self._admit(cmd, identity, original)

    async def _connect_on_pool(self, cmd: pb.CommandConnect, authenticate_original: bool) -> None:
        try:
            identity = await self._authn.authenticate_async(
                self._method, cmd.auth_data, self._peer_cert()
            )
            original = None
            if authenticate_original:
                original = await self._authn.authenticate_async(
                    self._original_method, cmd.original_auth_data.encode(), None
                )
        except AuthenticationFailure as failure:
            self._refuse(failure)
            self._conn.connect_finished(False)
            return
        self._conn.connect_finished(self._admit(cmd, identity, original) is ConnectOutcome.ACCEPTED)

    def _admit(
        self, cmd: pb.CommandConnect, identity: Identity | None, original: Identity | None
    ) -> ConnectOutcome:
        """Authenticated: check the proxy roles (Pulsar's ``completeConnect``), then keep it."""
        self.identity = identity
        if original is not None:
            self._original_identity = original
            self.original_principal = original.role
        elif cmd.HasField("original_principal"):
            self.original_principal = cmd.original_principal
        if self._authorizer.enabled:
            error = self._authorizer.original_principal_error(self.role, self.original_principal)
            if error is not None:
                log.warning(
                    "refusing %s: role %r, original principal %r: %s",
                    self._conn.peer,
                    self.role,
                    self.original_principal,
                    error,
                )
                self._conn.refuse_after(
                    0.0, commands.error(-1, ServerError.AuthorizationError, _INVALID_ROLES)
                )
                return ConnectOutcome.REFUSED
        if self._refreshable() is not None:
            self._schedule_refresh_check()
        return ConnectOutcome.ACCEPTED

    def _peer_cert(self) -> dict[str, Any] | None:
        return peer_certificate(self._conn.transport)

    def _refuse(self, failure: AuthenticationFailure) -> None:
        _failure_log.log(
            logging.WARNING,
            self._conn.peer,
            "authentication of %s failed (method %r): %s",
            self._conn.peer,
            self._method,
            failure.reason,
        )
        # A full check queue checked nothing, so there is no guess to slow down: answer at once.
        delay = 0.0 if isinstance(failure, CheckQueueFull) else self._authn.failure_delay
        self._conn.refuse_after(delay, commands.error(-1, ServerError.AuthenticationError, _FAILED))

    # -- refresh --------------------------------------------------------------------------------

    def _refreshable(self) -> Identity | None:
        """The credential that expires: the client's when a proxy forwarded it and it was
        authenticated, else the connection's own; None if it never expires."""
        identity = self._original_identity or self.identity
        return identity if identity is not None and identity.expires_at is not None else None

    def _schedule_refresh_check(self) -> None:
        self._timer = self._conn.loop.call_later(
            self._authn.refresh_check_seconds, self._refresh_check
        )

    def connection_lost(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _refresh_check(self) -> None:
        identity = self._refreshable()
        if self._conn.closing or identity is None:
            return
        if not identity.expired():
            self._schedule_refresh_check()
            return
        if self.original_principal is not None and self._original_identity is None:
            log.info("closing %s: the proxy's credentials expired", self._conn.peer)
            self._conn.close()
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
                self._refresh_method(),
                REFRESH_AUTH_DATA,
                protocol_version=self._protocol_version,
            )
        )
        self._schedule_refresh_check()

    def _refresh_method(self) -> str:
        return self._original_method if self._original_identity is not None else self._method

    def on_auth_response(self, frame: Frame) -> None:
        cmd = frame.command.authResponse
        self._challenge_pending = False
        current = self._original_identity or self.identity
        if current is None or not cmd.HasField("response"):
            self._conn.close()
            return
        method = self._refresh_method()
        data = cmd.response.auth_data
        if self._authn.is_blocking(method):
            # Off the loop; answers sent faster than checked fill the bounded queue, and the
            # refusal that follows closes the connection.
            self._conn.spawn(self._renew_on_pool(method, data, current))
            return
        try:
            renewed = self._authn.authenticate(method, data, self._peer_cert())
        except AuthenticationFailure as failure:
            self._refuse(failure)
            return
        self._renewed(current, renewed)

    async def _renew_on_pool(self, method: str, data: bytes, current: Identity) -> None:
        try:
            renewed = await self._authn.authenticate_async(method, data, self._peer_cert())
        except AuthenticationFailure as failure:
            self._refuse(failure)
            return
        self._renewed(current, renewed)

    def _renewed(self, current: Identity, renewed: Identity | None) -> None:
        if renewed is None or renewed.role != current.role:
            log.warning(
                "closing %s: its role changed on an authentication refresh", self._conn.peer
            )
            self._conn.close()
            return
        if self._original_identity is not None:
            self._original_identity = renewed
        else:
            self.identity = renewed
        log.info("refreshed the credentials of role %r on %s", renewed.role, self._conn.peer)
