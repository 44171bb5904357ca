"""``CryptoKeyReader``: the official default key reader, over two PEM files.

As the C++ ``DefaultCryptoKeyReader``, every key name maps to the same two files (the name only
travels in the message metadata, ``EncryptionKeys.key``), the files are read at each request
rather than at creation (a key replaced on disk is picked up when the data key is next
encrypted), and no key metadata is attached.
"""

from __future__ import annotations

from collections.abc import Mapping

from client.arguments import check_type
from client.errors import CryptoError

__all__ = ["CryptoKeyReader"]


class CryptoKeyReader:
    """The official ``pulsar.CryptoKeyReader(public_key_path, private_key_path)``."""

    __slots__ = ("_private_key_path", "_public_key_path")

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        """Raises:
        ValueError: a path that is not a ``str`` (the official check and message).
        """
        check_type(str, public_key_path, "public_key_path")
        check_type(str, private_key_path, "private_key_path")
        self._public_key_path = public_key_path
        self._private_key_path = private_key_path

    def public_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> tuple[bytes, dict[str, str]]:
        """The PEM public key for ``key_name`` and the metadata to store beside it.

        Raises:
            CryptoError: the file cannot be read.
        """
        return _read(self._public_key_path, key_name), {}

    def private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> tuple[bytes, dict[str, str]]:
        """The PEM private key for ``key_name`` (``metadata``: what the producer stored).

        Raises:
            CryptoError: the file cannot be read.
        """
        return _read(self._private_key_path, key_name), {}

    def __repr__(self) -> str:
        return f"CryptoKeyReader({self._public_key_path!r}, {self._private_key_path!r})"


def _read(path: str, key_name: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CryptoError(f"cannot read the key file of {key_name!r}: {exc}") from None
