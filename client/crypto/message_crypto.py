"""Encrypting and decrypting entry payloads, byte for byte as the C++ ``MessageCrypto``.

The wire format (PIP-4), which both official clients read and write:

* a random 32-byte AES-256 **data key** per producer, regenerated every 4 hours (the C++
  producer's ``dataKeyRefreshTask_`` period; here lazily, at the first send after it passes);
* the data key encrypted with each named RSA public key, **RSA-OAEP with SHA-1 and MGF1-SHA-1**
  and no label (OpenSSL's ``RSA_PKCS1_OAEP_PADDING``), in ``MessageMetadata.encryption_keys``
  (name, encrypted key, the reader's metadata for it);
* the payload, after compression and for a batch the whole batch payload, encrypted with
  **AES-256-GCM** under a fresh random 12-byte IV per entry (``encryption_param``), the 16-byte
  tag appended to the ciphertext; no associated data; ``encryption_algo`` left unset.

A consumer caches decrypted data keys by the MD5 of their encrypted form, as the C++ one does,
so only the first entry under each data key costs an RSA decryption.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from client.crypto.key_reader import CryptoKeyReader
from client.errors import CryptoError
from protocol import pb

__all__ = ["DATA_KEY_REFRESH_SECONDS", "MessageDecryptor", "MessageEncryptor"]

DATA_KEY_LENGTH = 32  # AES-256
IV_LENGTH = 12  # GCM's recommended nonce size, what the C++ client writes
TAG_LENGTH = 16
#: How long a producer keeps one data key (the C++ and Java producers' 4 hours).
DATA_KEY_REFRESH_SECONDS = 4 * 60 * 60
#: How long a consumer keeps a decrypted data key it has not used (the C++ cache's 4 hours).
DATA_KEY_CACHE_SECONDS = 4 * 60 * 60

_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)


class MessageEncryptor:
    """A producer's encryption: one data key, encrypted once per key name and data key.

    ``clock`` (seconds, monotonic) is a parameter so that tests can pass the rotation time.
    """

    __slots__ = ("_clock", "_data_key", "_encrypted", "_generated_at", "_key_names", "_reader")

    def __init__(
        self,
        key_names: Sequence[str],
        reader: CryptoKeyReader,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key_names = tuple(key_names)
        self._reader = reader
        self._clock = clock
        self._data_key = b""
        self._generated_at = 0.0
        # key name -> (encrypted data key, metadata): the EncryptionKeys of every entry.
        self._encrypted: dict[str, tuple[bytes, dict[str, str]]] = {}
        self._new_data_key()

    @property
    def data_key(self) -> bytes:
        return self._data_key

    def _new_data_key(self) -> None:
        self._data_key = os.urandom(DATA_KEY_LENGTH)
        self._generated_at = self._clock()
        self._encrypted.clear()

    def _encrypted_key(self, name: str) -> tuple[bytes, dict[str, str]]:
        cached = self._encrypted.get(name)
        if cached is None:
            if not name:
                raise CryptoError("an encryption key name is empty")
            pem, metadata = self._reader.public_key(name, {})
            key = _load_public_key(pem, name)
            cached = self._encrypted[name] = (key.encrypt(self._data_key, _OAEP), metadata)
        return cached

    def encrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """The encrypted ``payload`` (compressed already); fills ``metadata``'s
        ``encryption_keys`` and ``encryption_param``.

        Raises:
            CryptoError: a public key that cannot be read or loaded, or is not RSA.
        """
        if self._clock() - self._generated_at >= DATA_KEY_REFRESH_SECONDS:
            self._new_data_key()
        del metadata.encryption_keys[:]
        for name in self._key_names:
            value, key_metadata = self._encrypted_key(name)
            entry = metadata.encryption_keys.add(key=name, value=value)
            for meta_key, meta_value in key_metadata.items():
                entry.metadata.add(key=meta_key, value=meta_value)
        iv = os.urandom(IV_LENGTH)
        metadata.encryption_param = iv
        return AESGCM(self._data_key).encrypt(iv, payload, None)


class MessageDecryptor:
    """A consumer's decryption, with the data keys it has decrypted cached (see the module
    docstring)."""

    __slots__ = ("_cache", "_clock", "_reader")

    def __init__(
        self, reader: CryptoKeyReader, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._reader = reader
        self._clock = clock
        # MD5 of an encrypted data key -> (data key, when last used).
        self._cache: dict[bytes, tuple[bytes, float]] = {}

    def decrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes | None:
        """The decrypted payload, or None when no key of this reader opens it (a wrong or
        unreadable private key, a corrupted payload)."""
        plain = self._with_cached_keys(metadata, payload)
        if plain is not None:
            return plain
        for keys in metadata.encryption_keys:
            if self._decrypt_data_key(keys):
                return self._with_cached_keys(metadata, payload)
        return None

    def _with_cached_keys(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes | None:
        now = self._clock()
        for keys in metadata.encryption_keys:
            digest = hashlib.md5(keys.value, usedforsecurity=False).digest()
            cached = self._cache.get(digest)
            if cached is None:
                continue
            try:
                plain = AESGCM(cached[0]).decrypt(metadata.encryption_param, payload, None)
            except (InvalidTag, ValueError):
                continue  # an MD5 collision or a corrupted payload: try the next key
            self._cache[digest] = (cached[0], now)
            return plain
        return None

    def _decrypt_data_key(self, keys: pb.EncryptionKeys) -> bool:
        try:
            pem, _ = self._reader.private_key(keys.key, {kv.key: kv.value for kv in keys.metadata})
            private_key = _load_private_key(pem, keys.key)
            data_key = private_key.decrypt(keys.value, _OAEP)
        except (CryptoError, ValueError):
            return False
        now = self._clock()
        digest = hashlib.md5(keys.value, usedforsecurity=False).digest()
        self._cache[digest] = (data_key, now)
        expired = [d for d, (_, used) in self._cache.items() if now - used > DATA_KEY_CACHE_SECONDS]
        for stale in expired:
            del self._cache[stale]
        return True


def _load_public_key(pem: bytes, name: str) -> rsa.RSAPublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise CryptoError(f"cannot load the public key {name!r}: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        # ECIES (EC keys) is the Java client's only; the C++ client loads RSA keys only.
        raise CryptoError(f"the public key {name!r} is not an RSA key")
    return key


def _load_private_key(pem: bytes, name: str) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CryptoError(f"cannot load the private key {name!r}: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise CryptoError(f"the private key {name!r} is not an RSA key")
    return key
