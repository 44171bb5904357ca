"""Test key pairs, generated per test run (never committed), in the PEM forms OpenSSL writes
and the official client reads: the public key as SubjectPublicKeyInfo, the RSA private key as
PKCS#1 ("BEGIN RSA PRIVATE KEY")."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


class KeyFiles(NamedTuple):
    public: str
    private: str


def write_rsa_pair(folder: Path, name: str, bits: int = 2048) -> KeyFiles:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return _write(folder, name, key, serialization.PrivateFormat.TraditionalOpenSSL)


def write_ec_pair(folder: Path, name: str) -> KeyFiles:
    key = ec.generate_private_key(ec.SECP256R1())
    return _write(folder, name, key, serialization.PrivateFormat.TraditionalOpenSSL)


def _write(
    folder: Path,
    name: str,
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
    private_format: serialization.PrivateFormat,
) -> KeyFiles:
    public = folder / f"public-key.{name}.pem"
    private = folder / f"private-key.{name}.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, private_format, serialization.NoEncryption())
    )
    return KeyFiles(str(public), str(private))
