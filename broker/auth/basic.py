"""Basic authentication from an htpasswd file (Pulsar's ``AuthenticationProviderBasic``,
method ``basic``).

``basicAuthConf`` names the file (a path, ``file:``, ``data:`` or base64 text). Each line is
``user:hash`` with a bcrypt (``$2a$``/``$2b$``/``$2y$``) or Apache APR1 (``$apr1$``) hash, the
two ``htpasswd`` writes and Pulsar's test setup uses. Anything else (plain text, DES crypt, SHA)
is refused for that user: a plain-text line must never work as a password. A hash of a
supported kind that is malformed (cut short, a bad salt) is logged at start-up and refused too:
an authentication failure, never an exception out of the check.

Checks cost the same whoever asks: a user that does not exist, or whose line cannot be used,
is checked against a dummy hash of the kind and bcrypt cost most entries of the file use, so
timing does not tell which user names exist. The checks are CPU work (``blocking``): the
authentication service runs them on its bounded pool (``broker/auth/check_pool.py``).

Credentials arrive as ``user:password`` (CONNECT ``auth_data``) or as
``Authorization: Basic base64(user:password)`` over HTTP.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections import Counter
from typing import Any

import bcrypt
from passlib.hash import apr_md5_crypt

from broker.auth.identity import AuthenticationFailure, Identity
from broker.auth.keys import KeyMaterialError, read_key_material
from broker.config import BrokerConfig, ConfigError

__all__ = ["BasicProvider", "dummy_hash_for", "parse_htpasswd"]

log = logging.getLogger(__name__)

_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")  # htpasswd -B writes $2y$
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_BCRYPT_MAX_BYTES = 72  # bcrypt reads no further; Apache's htpasswd cuts there too
_DEFAULT_COST = 10  # htpasswd -B's default, for a file without a bcrypt entry
_APR1 = "apr1"


def is_supported_hash(hashed: str) -> bool:
    """A bcrypt or an Apache APR1 (``$apr1$``) hash, the two htpasswd forms accepted."""
    return hashed.startswith(_BCRYPT_PREFIXES) or bool(apr_md5_crypt.identify(hashed))


def _kind(hashed: str) -> int | str | None:
    """The bcrypt cost of a well-formed bcrypt hash, ``"apr1"`` for a well-formed APR1 one,
    None for anything else (unsupported or malformed)."""
    match = _BCRYPT.fullmatch(hashed)
    if match is not None:
        cost = int(match.group(1))
        return cost if 4 <= cost <= 31 else None
    if apr_md5_crypt.identify(hashed):
        try:
            apr_md5_crypt.from_string(hashed)
        except ValueError:
            return None
        return _APR1 if hashed.count("$") == 3 else None  # a config string has no checksum
    return None


def dummy_hash_for(hashes: list[str]) -> str:
    """A hash of the kind (and bcrypt cost) most of ``hashes`` have, the larger cost on a tie:
    checking an unknown user against it costs what checking a real one costs."""
    kinds = Counter(k for k in map(_kind, hashes) if k is not None)
    if not kinds:
        kind: int | str = _DEFAULT_COST
    else:
        top = max(kinds.values())
        candidates = [k for k, n in kinds.items() if n == top]
        costs = [k for k in candidates if isinstance(k, int)]
        kind = max(costs) if costs else _APR1
    secret = b"magnetar-no-such-user"
    if kind == _APR1:
        return str(apr_md5_crypt.hash(secret.decode()))
    assert isinstance(kind, int)
    return bcrypt.hashpw(secret, bcrypt.gensalt(kind, prefix=b"2b")).decode()


def verify_password(password: str, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed`` (constant time in the libraries).

    Raises:
        ValueError: ``hashed`` is malformed.
    """
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
    blocking = True  # bcrypt: run on the check pool, never on the event loop

    def __init__(self, config: BrokerConfig) -> None:
        if not config.basic_auth_conf:
            raise ConfigError("the basic provider needs basicAuthConf", key="basicAuthConf")
        try:
            text = read_key_material(config.basic_auth_conf, allow_path=True).decode()
            users = parse_htpasswd(text)
        except (KeyMaterialError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"basicAuthConf: {exc}", key="basicAuthConf") from None
        self._users: dict[str, str] = {}
        for user, hashed in users.items():
            if _kind(hashed) is None:
                what = "a malformed" if is_supported_hash(hashed) else "an unsupported"
                log.warning("basicAuthConf: user %r has %s hash; it cannot log in", user, what)
            else:
                self._users[user] = hashed
        self._dummy = dummy_hash_for(list(users.values()))

    def authenticate(self, data: bytes, peer_cert: dict[str, Any] | None = None) -> Identity:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailure("basic credentials are not UTF-8") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthenticationFailure("basic credentials are not user:password")
        hashed = self._users.get(user)
        if hashed is None:
            verify_password(password, self._dummy)
            raise AuthenticationFailure(f"unknown user {user!r} or unusable hash")
        try:
            matches = verify_password(password, hashed)
        except ValueError as exc:  # checked at start-up; a library may still disagree
            log.warning("basicAuthConf: the hash of user %r cannot be checked: %s", user, exc)
            raise AuthenticationFailure(f"malformed hash for {user!r}") from None
        if not matches:
            raise AuthenticationFailure(f"wrong password for {user!r}")
        return Identity(user, self.method)

    @staticmethod
    def from_http_header(value: str) -> bytes:
        """``user:password`` from the base64 part of ``Authorization: Basic ...``."""
        try:
            return base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailure("Authorization: Basic is not base64") from None
