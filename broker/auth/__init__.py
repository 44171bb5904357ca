"""Authentication and authorization, with Pulsar's configuration keys and semantics.

One module per concept: ``keys`` (``file:``/``data:`` key references), ``token``, ``basic``
and ``tls`` (the providers), ``providers`` (``authenticationProviders`` and method lookup),
``check_pool`` (password checks off the event loop, bounded),
``store`` (tenant admin roles, namespace permissions), ``authorization`` (one check per
operation), ``handshake`` (CONNECT, AUTH_CHALLENGE / AUTH_RESPONSE on a binary connection),
``http`` (the admin API's middleware and per-route rules), ``metrics``.

``Security`` bundles what a ``BrokerService`` holds.
"""

from __future__ import annotations

from pathlib import Path

from broker.auth.authorization import Authorizer
from broker.auth.identity import AuthenticationFailure, Identity
from broker.auth.providers import AuthenticationService
from broker.auth.store import AuthPolicyStore
from broker.config import BrokerConfig

__all__ = ["AuthenticationFailure", "Identity", "Security"]


class Security:
    """The broker's authentication service, authorizer and authorization metadata."""

    def __init__(self, config: BrokerConfig, metadata_dir: Path) -> None:
        self.authentication = AuthenticationService(config)
        self.store = AuthPolicyStore(metadata_dir)
        self.authorizer = Authorizer(config, self.store)
