"""What ``Message.encryption_context()`` returns: the official ``pulsar.EncryptionContext``
and ``pulsar.EncryptionKey``, read from an encrypted entry's ``MessageMetadata``.

Every field comes from the metadata as the C++ ``EncryptionContext`` reads it: the keys (name,
encrypted data key, metadata), ``encryption_param`` (the IV), ``encryption_algo`` (empty from
the C++ and Java producers, which never set it), the compression and uncompressed size, the
batch size (-1 for a message not batched) and whether this consumer failed to decrypt it.
"""

from __future__ import annotations

from protocol import pb
from protocol.enums import CompressionType

__all__ = ["EncryptionContext", "EncryptionKey"]


class EncryptionKey:
    """One named key that encrypted the message's data key."""

    __slots__ = ("_key", "_metadata", "_value")

    def __init__(self, key: str, value: bytes, metadata: dict[str, str]) -> None:
        self._key = key
        self._value = value
        self._metadata = metadata

    @property
    def key(self) -> str:
        """The key's name (the producer's ``encryption_key``)."""
        return self._key

    @property
    def value(self) -> bytes:
        """The data key, encrypted with this key."""
        return self._value

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    def __str__(self) -> str:
        return (
            f"EncryptionKey(key={self._key}, value_len={len(self._value)}, "
            f"metadata={self._metadata})"
        )

    __repr__ = __str__


class EncryptionContext:
    """How a received message was encrypted (and compressed)."""

    __slots__ = ("_failed", "_metadata")

    def __init__(self, metadata: pb.MessageMetadata, is_decryption_failed: bool) -> None:
        self._metadata = metadata
        self._failed = is_decryption_failed

    def keys(self) -> list[EncryptionKey]:
        return [
            EncryptionKey(k.key, k.value, {kv.key: kv.value for kv in k.metadata})
            for k in self._metadata.encryption_keys
        ]

    def param(self) -> bytes:
        """The AES-GCM IV."""
        return self._metadata.encryption_param

    def algorithm(self) -> str:
        return self._metadata.encryption_algo

    def compression_type(self) -> CompressionType:
        return CompressionType(self._metadata.compression)

    def uncompressed_message_size(self) -> int:
        return self._metadata.uncompressed_size

    def batch_size(self) -> int:
        metadata = self._metadata
        if metadata.HasField("num_messages_in_batch"):
            return metadata.num_messages_in_batch
        return -1

    def is_decryption_failed(self) -> bool:
        return self._failed

    def __str__(self) -> str:
        keys = ", ".join(str(key) for key in self.keys())
        return (
            f"EncryptionContext(algorithm={self.algorithm()}, "
            f"compression_type={self.compression_type().name}, "
            f"uncompressed_message_size={self.uncompressed_message_size()}, "
            f"is_decryption_failed={self._failed}, keys=[{keys}])"
        )

    __repr__ = __str__
