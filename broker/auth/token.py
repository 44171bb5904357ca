"""JWT authentication (Pulsar's ``AuthenticationProviderToken``, method ``token``), and the
keys and tokens ``magnetar tokens`` creates (``pulsar tokens ...``).

The broker verifies with ``tokenSecretKey`` (HMAC: HS256/384/512) or ``tokenPublicKey`` (RSA:
RS*/PS*, EC: ES*); the algorithms accepted follow from the key's type, never from the token, so
an HS256 token "signed" with a public key, or ``alg: none``, is refused. The role is the claim
``tokenAuthClaim`` (``sub``); ``exp`` is enforced at CONNECT and by the live connection's
re-check, the same value both times (a number or a numeric string; anything else is refused,
as Pulsar's jjwt refuses it at parse time); when set, ``tokenAudience`` must be in the
``tokenAudienceClaim`` claim. Keys are Pulsar's formats: a raw secret, DER (PKCS#8 private,
X.509 SubjectPublicKeyInfo public); PEM is accepted too.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.auth.identity import AuthenticationFailure, Identity
from broker.auth.keys import KeyMaterialError, read_key_material
from broker.config import BrokerConfig, ConfigError

__all__ = [
    "TokenProvider",
    "create_key_pair",
    "create_secret_key",
    "create_token",
    "load_private_key",
]

_HMAC = ("HS256", "HS384", "HS512")
_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC = ("ES256", "ES384", "ES512")
_BEARER = "Bearer "


@dataclass(frozen=True, slots=True)
class _Verifier:
    key: Any
    algorithms: tuple[str, ...]


class TokenProvider:
    """Verifies tokens sent as CONNECT ``auth_data`` or ``Authorization: Bearer``."""

    method = "token"
    blocking = False  # an HMAC or one signature check: microseconds

    def __init__(self, config: BrokerConfig) -> None:
        self._verifier = _verifier_from(config)
        self._claim = config.token_auth_claim
        self._audience_claim = config.token_audience_claim
        self._audience = config.token_audience or None

    def authenticate(self, data: bytes, peer_cert: dict[str, Any] | None = None) -> Identity:
        try:
            token = data.decode("ascii").strip().removeprefix(_BEARER).strip()
        except UnicodeDecodeError:
            raise AuthenticationFailure("token is not ASCII") from None
        if not token:
            raise AuthenticationFailure("no token")
        claims = self._decode(token)
        role = _role_of(claims.get(self._claim))
        if role is None:
            raise AuthenticationFailure(f"token has no usable {self._claim!r} claim")
        return Identity(role, self.method, _expiry_of(claims))

    def _decode(self, token: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self._verifier.key,
                algorithms=list(self._verifier.algorithms),
                options={"verify_aud": False},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailure("token expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationFailure(f"invalid token: {type(exc).__name__}: {exc}") from None
        if self._audience is not None:
            audience = claims.get(self._audience_claim)
            names = audience if isinstance(audience, list) else [audience]
            if self._audience not in names:
                raise AuthenticationFailure("token is not for this audience")
        return claims


def _expiry_of(claims: dict[str, Any]) -> float | None:
    """``exp`` in epoch seconds, the same value PyJWT checked: a number, or a string of digits
    (which Pulsar's jjwt reads as a number too). Anything else is refused as jjwt refuses it at
    parse time, so a connection never keeps a token whose expiry cannot be re-checked later.
    """
    if "exp" not in claims:
        return None
    exp = claims["exp"]
    if isinstance(exp, bool):  # a JSON true is not a time (Python counts it as the int 1)
        raise AuthenticationFailure("token's exp claim is not a number")
    if isinstance(exp, int | float):
        return float(exp)
    if isinstance(exp, str):
        try:
            return float(int(exp))  # what PyJWT compared against the clock
        except ValueError:
            pass
    raise AuthenticationFailure("token's exp claim is not a number")


def _role_of(value: object) -> str | None:
    # Pulsar takes a string claim, or the first element of a list claim.
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) and value else None


def _verifier_from(config: BrokerConfig) -> _Verifier:
    try:
        if config.token_secret_key:
            return _Verifier(read_key_material(config.token_secret_key), _HMAC)
        if config.token_public_key:
            return _public_verifier(read_key_material(config.token_public_key))
    except KeyMaterialError as exc:
        raise ConfigError(f"token key: {exc}", key="tokenSecretKey") from None
    raise ConfigError(
        "the token provider needs tokenSecretKey or tokenPublicKey", key="tokenSecretKey"
    )


def _public_verifier(material: bytes) -> _Verifier:
    try:
        if material.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(material)
        else:
            key = serialization.load_der_public_key(material)
    except ValueError:
        raise ConfigError(
            "tokenPublicKey is not an RSA or EC public key", "tokenPublicKey"
        ) from None
    if isinstance(key, rsa.RSAPublicKey):
        return _Verifier(key, _RSA)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _Verifier(key, _EC)
    raise ConfigError("tokenPublicKey must be an RSA or EC key", key="tokenPublicKey")


# ---------------------------------------------------------------------- creating (CLI, tests)


def create_secret_key() -> bytes:
    """A random 256-bit HS256 secret (``pulsar tokens create-secret-key``)."""
    return secrets.token_bytes(32)


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """``(private PKCS#8 DER, public SubjectPublicKeyInfo DER)`` for RS*/PS* or ES*."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in _RSA:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in _EC:
        curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
        private = ec.generate_private_key(curve[algorithm])
    else:
        raise ValueError(f"unsupported signature algorithm {algorithm!r}")
    private_der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


def load_private_key(material: bytes) -> Any:
    """A PKCS#8 private key, DER or PEM."""
    if material.lstrip().startswith(b"-----BEGIN"):
        return serialization.load_pem_private_key(material, password=None)
    return serialization.load_der_private_key(material, password=None)


def create_token(
    key: bytes,
    subject: str,
    *,
    private: bool = False,
    algorithm: str | None = None,
    expires_in: float | None = None,
    claim: str = "sub",
    now: float | None = None,
) -> str:
    """A signed token naming ``subject`` in ``claim`` (``pulsar tokens create``).

    ``key`` is an HMAC secret, or with ``private=True`` a private key (DER or PEM), whose
    type picks RS256 or ES256 unless ``algorithm`` says otherwise.
    """
    claims: dict[str, Any] = {claim: subject}
    if expires_in is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in)
    if not private:
        return jwt.encode(claims, key, algorithm=algorithm or "HS256")
    signer = load_private_key(key)
    if algorithm is None:
        algorithm = "ES256" if isinstance(signer, ec.EllipticCurvePrivateKey) else "RS256"
    return jwt.encode(claims, signer, algorithm=algorithm)
