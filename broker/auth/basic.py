"""Basic authentication from an htpasswd file (Pulsar's ``AuthenticationProviderBasic``,
method ``basic``).

``basicAuthConf`` names the file (a path, ``file:``, ``data:`` or base64 text). Each line is
``user:hash`` with a bcrypt (``$2a$``/``$2b$``/``$2y$``) or Apache APR1 (``$apr1$``) hash, the
two ``htpasswd`` writes and Pulsar's test setup uses. Anything else (plain text, DES crypt, SHA)
is refused for that user: a plain-text line must never work as a password. Hashes are checked by
passlib (constant time); an unknown user costs a bcrypt check too, so timing does not tell
which user names exist.

Credentials arrive as ``user:password`` (CONNECT ``auth_data``) or as
``Authorization: Basic base64(user:password)`` over HTTP.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

import bcrypt
from passlib.hash import apr_md5_crypt

from broker.auth.identity import AuthenticationFailure, Identity
from broker.auth.keys import KeyMaterialError, read_key_material
from broker.config import BrokerConfig, ConfigError

__all__ = ["BasicProvider", "parse_htpasswd"]

log = logging.getLogger(__name__)

_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")  # htpasswd -B writes $2y$
_BCRYPT_MAX_BYTES = 72  # bcrypt reads no further; Apache's htpasswd cuts there too
# Checked against when the user does not exist, so that costs what a wrong password costs.
_DUMMY_HASH = bcrypt.hashpw(b"magnetar-no-such-user", bcrypt.gensalt(10)).decode()


def is_supported_hash(hashed: str) -> bool:
    """A bcrypt or an Apache APR1 (``$apr1$``) hash, the two htpasswd forms accepted."""
    return hashed.startswith(_BCRYPT_PREFIXES) or bool(apr_md5_crypt.identify(hashed))


def verify_password(password: str, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed`` (constant time in the libraries)."""
    if hashed.startswith(_BCRYPT_PREFIXES):
        secret = password.encode()[:_BCRYPT_MAX_BYTES]
        return bcrypt.checkpw(secret, hashed.encode())
    return bool(apr_md5_crypt.verify(password, hashed))


def parse_htpasswd(text: str) -> dict[str, str]:
    """``user -> hash`` from htpasswd lines (blank lines and ``#`` comments skipped)."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed:
            raise ValueError(f"line {number} is not user:hash")
        users[user] = hashed
    return users


class BasicProvider:
    """Verifies ``user:password`` against the htpasswd file read at start-up."""

    method = "basic"

    def __init__(self, config: BrokerConfig) -> None:
        if not config.basic_auth_conf:
            raise ConfigError("the basic provider needs basicAuthConf", key="basicAuthConf")
        try:
            text = read_key_material(config.basic_auth_conf, allow_path=True).decode()
            self._users = parse_htpasswd(text)
        except (KeyMaterialError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"basicAuthConf: {exc}", key="basicAuthConf") from None
        for user, hashed in self._users.items():
            if not is_supported_hash(hashed):
                log.warning(
                    "basicAuthConf: user %r has an unsupported hash; it cannot log in", user
                )

    def authenticate(self, data: bytes, peer_cert: dict[str, Any] | None = None) -> Identity:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailure("basic credentials are not UTF-8") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthenticationFailure("basic credentials are not user:password")
        hashed = self._users.get(user)
        if hashed is None or not is_supported_hash(hashed):
            verify_password(password, _DUMMY_HASH)
            raise AuthenticationFailure(f"unknown user {user!r} or unsupported hash")
        if not verify_password(password, hashed):
            raise AuthenticationFailure(f"wrong password for {user!r}")
        return Identity(user, self.method)

    @staticmethod
    def from_http_header(value: str) -> bytes:
        """``user:password`` from the base64 part of ``Authorization: Basic ...``."""
        try:
            return base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailure("Authorization: Basic is not base64") from None
