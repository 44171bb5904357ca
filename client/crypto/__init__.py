"""End-to-end encryption (PIP-4), on the wire exactly as the C++ client's ``MessageCrypto``.

* ``key_reader``: ``CryptoKeyReader``, the official class (PEM files named at creation).
* ``message_crypto``: the producer's ``MessageEncryptor`` and the consumer's
  ``MessageDecryptor``; pure functions of bytes and ``MessageMetadata``, no I/O but reading
  the key files through the reader.
* ``context``: ``EncryptionContext`` / ``EncryptionKey``, what ``Message.encryption_context()``
  returns.
"""

from client.crypto.context import EncryptionContext, EncryptionKey
from client.crypto.key_reader import CryptoKeyReader
from client.crypto.message_crypto import MessageDecryptor, MessageEncryptor

__all__ = [
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "MessageDecryptor",
    "MessageEncryptor",
]
