"""Key material named the way Pulsar's configuration names it.

``tokenSecretKey``, ``tokenPublicKey`` and ``basicAuthConf`` take a reference, not the bytes:
``file:///path`` (or ``file:/path``), a ``data:`` URL (``data:;base64,<b64>`` or plain
``data:,text``), or, as Pulsar's ``AuthTokenUtils.readKeyFromUrl`` accepts, the base64 text
itself. ``basicAuthConf`` may also be a bare path (``AuthenticationProviderBasic``).
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["KeyMaterialError", "read_key_material"]


class KeyMaterialError(ValueError):
    """A key reference that cannot be read; the message names the reference's form, never
    the key itself."""


def read_key_material(reference: str, *, allow_path: bool = False) -> bytes:
    """The bytes ``reference`` names (see the module docstring).

    Raises:
        KeyMaterialError: unreadable file, malformed ``data:`` URL or text that is not base64.
    """
    text = reference.strip()
    if text.startswith("file:"):
        return _read_file(Path(unquote(urlparse(text).path)))
    if text.startswith("data:"):
        return _read_data_url(text)
    if allow_path and _is_file(text):
        return _read_file(Path(text))
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyMaterialError("key is neither file:, data: nor base64 text") from None


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:  # e.g. base64 text longer than a file name may be
        return False


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyMaterialError(f"cannot read key file {path}: {exc.strerror}") from None


def _read_data_url(url: str) -> bytes:
    header, comma, payload = url[len("data:") :].partition(",")
    if not comma:
        raise KeyMaterialError("data: URL without a comma")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise KeyMaterialError("data: URL is not valid base64") from None
    return unquote(payload).encode()
