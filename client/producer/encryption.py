"""Encryption on send: the producer's accumulator, wrapped so that every entry leaves encrypted.

The accumulators (``client.accumulator``, ``client.key_based_batching``) build complete SEND
frames, compressed and, for batches, with the whole batch payload in one entry. Encryption
comes after compression and covers a batch as a whole (the C++ ``ProducerImpl`` order), so it
applies to exactly those entries: each operation's frame is opened, its payload encrypted and
its metadata given the encryption keys and IV (``client.crypto``), and the frame rebuilt with
the same SEND command. A chunked message is encrypted chunk by chunk, each chunk under its own
IV, as the C++ producer does (``ProducerImpl::sendAsync``), and a consumer decrypts each chunk
before reassembling them; ``ENCRYPTION_OVERHEAD`` is kept free in each chunk for what
encryption adds. An operation that cannot be encrypted fails with ``CryptoError`` and
sends nothing (the producer releases its queue slots), as the C++ producer fails the send.

Rebuilding costs a parse of the metadata per entry, small beside the AES and far beside the
RSA work; it keeps the batching code free of encryption.
"""

from __future__ import annotations

from client.accumulator import Accumulator
from client.batching import OutgoingMessage
from client.crypto import MessageEncryptor
from client.errors import CryptoError
from client.pending import Completion, SendOp
from protocol import FrameDecoder, decode_entry, encode_entry, encode_payload_command

__all__ = ["EncryptingAccumulator", "encryption_overhead"]

# A SEND frame is at most the broker's max message size plus the command; the decoder only
# reads frames this producer built, so its bound is not a defence, just large enough.
_MAX_FRAME = 1 << 31


def encryption_overhead(key_names: tuple[str, ...] | list[str]) -> int:
    """A bound on what encryption adds to an entry: the GCM tag, the IV field and, per key, its
    name and an encrypted data key of up to 8192-bit RSA (1024 bytes), with protobuf framing.
    Chunks are cut this much smaller so that, encrypted, they still fit the broker's limit."""
    return 64 + sum(len(name.encode()) + 1024 + 16 for name in key_names)


class EncryptingAccumulator:
    """An ``Accumulator`` whose operations carry encrypted entries."""

    __slots__ = ("_encryptor", "_inner")

    def __init__(self, inner: Accumulator, encryptor: MessageEncryptor) -> None:
        self._inner = inner
        self._encryptor = encryptor

    @property
    def deadline(self) -> int | None:
        return self._inner.deadline

    def add(self, message: OutgoingMessage, future: Completion, now_ms: int) -> list[SendOp]:
        return self._encrypt_all(self._inner.add(message, future, now_ms))

    def drain(self) -> list[SendOp]:
        return self._encrypt_all(self._inner.drain())

    def _encrypt_all(self, ops: list[SendOp]) -> list[SendOp]:
        for op in ops:
            if not op.frame:
                continue  # already failed while being built
            try:
                op.frame = self._encrypt_frame(op.frame)
            except CryptoError as exc:
                op.fail(exc)
                op.frame = b""  # the producer releases the permits and sends nothing
        return ops

    def _encrypt_frame(self, frame: bytes) -> bytes:
        decoder = FrameDecoder(_MAX_FRAME)
        decoder.feed(frame)
        parsed = next(decoder)
        assert parsed.entry is not None  # a SEND frame always carries its entry
        metadata, payload = decode_entry(parsed.entry)
        encrypted = self._encryptor.encrypt(metadata, payload)
        return encode_payload_command(parsed.command, encode_entry(metadata, encrypted))
