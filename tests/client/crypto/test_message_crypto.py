"""``client.crypto``: the wire format of the C++ ``MessageCrypto`` (checked here with plain
``cryptography`` primitives, independently of our code), data key rotation, failures."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import client
from client.crypto import CryptoKeyReader, MessageDecryptor, MessageEncryptor
from client.crypto.message_crypto import DATA_KEY_REFRESH_SECONDS
from client.producer import ProducerOptions
from protocol import pb
from tests.client.crypto.keys import KeyFiles, write_ec_pair, write_rsa_pair


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_rsa_pair(tmp_path_factory.mktemp("keys"), "a")


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_rsa_pair(tmp_path_factory.mktemp("other"), "b")


def test_wire_format_is_oaep_sha1_and_aes_256_gcm(keys: KeyFiles) -> None:
    encryptor = MessageEncryptor(["k1", "k2"], CryptoKeyReader(*keys))
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    ciphertext = encryptor.encrypt(metadata, b"payload")
    assert [k.key for k in metadata.encryption_keys] == ["k1", "k2"]
    assert len(metadata.encryption_param) == 12
    assert not metadata.HasField("encryption_algo")  # the C++ producer leaves it unset
    assert len(ciphertext) == len(b"payload") + 16  # the GCM tag appended
    private = serialization.load_pem_private_key(Path(keys.private).read_bytes(), None)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    for key in metadata.encryption_keys:
        assert len(key.value) == 256  # RSA-2048
        data_key = private.decrypt(key.value, oaep)  # type: ignore[union-attr]
        assert data_key == encryptor.data_key
        assert len(data_key) == 32
        plain = AESGCM(data_key).decrypt(metadata.encryption_param, ciphertext, None)
        assert plain == b"payload"


def test_round_trip_fresh_iv_per_entry_and_key_cache(keys: KeyFiles) -> None:
    reader = CryptoKeyReader(*keys)
    encryptor, decryptor = MessageEncryptor(["k"], reader), MessageDecryptor(reader)
    first, second = pb.MessageMetadata(), pb.MessageMetadata()
    c1, c2 = encryptor.encrypt(first, b"one"), encryptor.encrypt(second, b"two")
    assert first.encryption_param != second.encryption_param
    assert first.encryption_keys[0].value == second.encryption_keys[0].value  # one data key
    assert decryptor.decrypt(first, c1) == b"one"
    assert decryptor.decrypt(second, c2) == b"two"
    digest = hashlib.md5(first.encryption_keys[0].value, usedforsecurity=False).digest()
    assert list(decryptor._cache) == [digest]  # one RSA decryption for both


def test_data_key_rotates_after_four_hours(keys: KeyFiles) -> None:
    now = [1000.0]
    reader = CryptoKeyReader(*keys)
    encryptor = MessageEncryptor(["k"], reader, clock=lambda: now[0])
    decryptor = MessageDecryptor(reader)
    before = pb.MessageMetadata()
    old_ciphertext = encryptor.encrypt(before, b"x")
    old_key = encryptor.data_key
    now[0] += DATA_KEY_REFRESH_SECONDS - 1
    same = pb.MessageMetadata()
    encryptor.encrypt(same, b"x")
    assert encryptor.data_key == old_key
    now[0] += 1
    after = pb.MessageMetadata()
    new_ciphertext = encryptor.encrypt(after, b"y")
    assert encryptor.data_key != old_key
    assert after.encryption_keys[0].value != before.encryption_keys[0].value
    assert decryptor.decrypt(before, old_ciphertext) == b"x"
    assert decryptor.decrypt(after, new_ciphertext) == b"y"


def test_wrong_key_or_tampered_payload_gives_none(keys: KeyFiles, other: KeyFiles) -> None:
    encryptor = MessageEncryptor(["k"], CryptoKeyReader(*keys))
    metadata = pb.MessageMetadata()
    ciphertext = encryptor.encrypt(metadata, b"secret")
    assert MessageDecryptor(CryptoKeyReader(*other)).decrypt(metadata, ciphertext) is None
    right = MessageDecryptor(CryptoKeyReader(*keys))
    tampered = bytes([ciphertext[0] ^ 1]) + ciphertext[1:]
    assert right.decrypt(metadata, tampered) is None
    assert right.decrypt(metadata, ciphertext) == b"secret"
    missing = MessageDecryptor(CryptoKeyReader(keys.public, "/nonexistent/key.pem"))
    assert missing.decrypt(metadata, ciphertext) is None


def test_unusable_public_keys_raise_crypto_error(keys: KeyFiles, tmp_path: Path) -> None:
    ec = write_ec_pair(tmp_path, "ec")
    for reader, names in [
        (CryptoKeyReader(ec.public, ec.private), ["k"]),  # ECIES: not in the C++ client
        (CryptoKeyReader("/nonexistent/public.pem", keys.private), ["k"]),
        (CryptoKeyReader(keys.private, keys.private), ["k"]),  # not a public key
        (CryptoKeyReader(*keys), [""]),  # an empty key name
    ]:
        with pytest.raises(client.CryptoError):
            MessageEncryptor(names, reader).encrypt(pb.MessageMetadata(), b"x")


def test_official_argument_checks(keys: KeyFiles) -> None:
    with pytest.raises(ValueError, match="public_key_path"):
        CryptoKeyReader(1, keys.private)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="private_key_path"):
        CryptoKeyReader(keys.public, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="crypto_key_reader"):
        ProducerOptions("t", crypto_key_reader="reader")  # type: ignore[arg-type]
    config = ProducerOptions(
        "t", encryption_key="k", crypto_key_reader=CryptoKeyReader(*keys)
    ).producer_config()
    assert config.encryption_keys == ("k",)
    # As the official: a key name without a reader (or the reverse) encrypts nothing.
    assert ProducerOptions("t", encryption_key="k").producer_config().encryption_keys == ()
