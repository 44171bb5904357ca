"""Builders of protocol.commands.connection: each one round-trips with the right fields."""

from __future__ import annotations

from protocol import commands
from tests.protocol.commands.frames import T, decode_one, sub


def test_connect() -> None:
    connect = sub(
        commands.connect(
            "Magnetar-client", auth_method_name="none", supports_broker_entry_metadata=True
        ),
        T.CONNECT,
    )
    assert connect.client_version == "Magnetar-client"
    assert connect.protocol_version == 20
    assert connect.auth_method_name == "none"
    assert connect.feature_flags.supports_broker_entry_metadata
    assert not connect.feature_flags.supports_topic_watchers
    assert not connect.HasField("proxy_to_broker_url")


def test_connected() -> None:
    connected = sub(commands.connected("Magnetar 0.1", protocol_version=15), T.CONNECTED)
    assert connected.server_version == "Magnetar 0.1"
    assert connected.protocol_version == 15
    assert connected.max_message_size == 5 * 1024 * 1024
    bare = sub(commands.connected("x", max_message_size=None), T.CONNECTED)
    assert not bare.HasField("max_message_size")


def test_ping_pong_carry_their_sub_message() -> None:
    assert decode_one(commands.ping()).command.HasField("ping")
    assert decode_one(commands.pong()).command.HasField("pong")


def test_auth_challenge() -> None:
    challenge = sub(commands.auth_challenge("srv", "none", b"\x01"), T.AUTH_CHALLENGE)
    assert challenge.challenge.auth_method_name == "none"
    assert challenge.challenge.auth_data == b"\x01"
