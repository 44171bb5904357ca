"""``magnetar tokens ...``: keys and tokens, as ``pulsar tokens`` makes them.

* ``create-secret-key [--output FILE] [--base64]``: a random HS256 secret (raw bytes in FILE,
  as Pulsar writes it; base64 on stdout otherwise).
* ``create-key-pair --output-private-key F --output-public-key F [--signature-algorithm RS256]``:
  DER keys (PKCS#8 private, X.509 public), for ``tokenPublicKey = "file:///..."``.
* ``create --subject ROLE (--secret-key REF | --private-key REF) [--expiry-time 1y]``: a token,
  printed; REF in the broker's forms (``file:///path``, ``data:;base64,...``, base64 text).
* ``show TOKEN``: its header and claims, unverified (for debugging; never a validity check).
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import click

from broker.auth.keys import KeyMaterialError, read_key_material

__all__ = ["tokens"]

# The token functions (PyJWT, cryptography) are imported by the commands that use them: this
# group is part of the `magnetar` command that also starts the broker.

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31_536_000}


def _duration(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)([smhdwy]?)", text.strip())
    if match is None:
        raise click.BadParameter(f"{text!r}: use a number with s, m, h, d, w or y (e.g. 1y)")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def _write_private(path: Path, data: bytes) -> None:
    """Write a key only its owner may read (created 0600, never world-readable even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as stream:
        stream.write(data)


@click.group()
def tokens() -> None:
    """Create keys and tokens for token authentication (as `pulsar tokens`)."""


@tokens.command("create-secret-key")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-b", "--base64", "as_base64", is_flag=True, help="Base64 text in the file too.")
def create_secret_key_command(output: Path | None, as_base64: bool) -> None:
    """A random secret for HS256 tokens (tokenSecretKey)."""
    from broker.auth.token import create_secret_key

    secret = create_secret_key()
    if output is None:
        click.echo(base64.b64encode(secret).decode())
        return
    _write_private(output, base64.b64encode(secret) if as_base64 else secret)


@tokens.command("create-key-pair")
@click.option(
    "--output-private-key", type=click.Path(dir_okay=False, path_type=Path), required=True
)
@click.option("--output-public-key", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option(
    "-a",
    "--signature-algorithm",
    default="RS256",
    show_default=True,
    type=click.Choice(["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"]),
)
def create_key_pair_command(
    output_private_key: Path, output_public_key: Path, signature_algorithm: str
) -> None:
    """A key pair for RS256/ES256 tokens (tokenPublicKey on the broker)."""
    from broker.auth.token import create_key_pair

    private, public = create_key_pair(signature_algorithm)
    _write_private(output_private_key, private)
    output_public_key.write_bytes(public)


@tokens.command("create")
@click.option("-s", "--subject", required=True, help="The role the token names.")
@click.option("-sk", "--secret-key", help="HS256 secret: file:///path, data:... or base64.")
@click.option("-pk", "--private-key", help="RSA/EC private key: file:///path, data:... .")
@click.option("-e", "--expiry-time", help="Lifetime, e.g. 30m, 12h, 1y; none by default.")
@click.option("-a", "--signature-algorithm", help="Default: HS256, RS256 or ES256 by key.")
@click.option("--claim", default="sub", show_default=True, help="Claim holding the role.")
def create_command(
    subject: str,
    secret_key: str | None,
    private_key: str | None,
    expiry_time: str | None,
    signature_algorithm: str | None,
    claim: str,
) -> None:
    """Print a signed token naming SUBJECT."""
    import jwt

    from broker.auth.token import create_token

    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give exactly one of --secret-key and --private-key")
    reference = secret_key if secret_key is not None else private_key
    assert reference is not None
    try:
        key = read_key_material(reference, allow_path=True)
    except KeyMaterialError as exc:
        raise click.UsageError(str(exc)) from None
    expires = _duration(expiry_time) if expiry_time else None
    try:
        token = create_token(
            key,
            subject,
            private=private_key is not None,
            algorithm=signature_algorithm,
            expires_in=expires,
            claim=claim,
        )
    except (ValueError, TypeError, jwt.InvalidKeyError) as exc:
        raise click.UsageError(f"cannot sign with that key: {exc}") from None
    click.echo(token)


@tokens.command("show")
@click.argument("token")
def show_command(token: str) -> None:
    """Print a token's header and claims (not verified)."""
    import jwt

    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise click.UsageError(f"not a token: {exc}") from None
    click.echo(json.dumps({"header": header, "claims": claims}, indent=2, sort_keys=True))
