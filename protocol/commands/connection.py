"""Connection commands: the CONNECT handshake, keep-alive and re-authentication."""

from __future__ import annotations

from protocol.commands.fields import T
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE
from protocol.framing import encode_command

#: Newest protocol version we speak (TOPIC_MIGRATED era, what the C++ 4.2.0 client sends).
PROTOCOL_VERSION = 20


def connect(
    client_version: str,
    *,
    protocol_version: int = PROTOCOL_VERSION,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    supports_auth_refresh: bool = False,
    supports_broker_entry_metadata: bool = False,
    supports_partial_producer: bool = False,
    supports_topic_watchers: bool = False,
) -> bytes:
    """CONNECT: the first frame a client sends."""
    cmd = T(type=T.CONNECT)
    sub = cmd.connect
    sub.client_version = client_version
    sub.protocol_version = protocol_version
    if auth_method_name is not None:
        sub.auth_method_name = auth_method_name
    if auth_data is not None:
        sub.auth_data = auth_data
    if proxy_to_broker_url is not None:
        sub.proxy_to_broker_url = proxy_to_broker_url
    flags = sub.feature_flags
    flags.supports_auth_refresh = supports_auth_refresh
    flags.supports_broker_entry_metadata = supports_broker_entry_metadata
    flags.supports_partial_producer = supports_partial_producer
    flags.supports_topic_watchers = supports_topic_watchers
    return encode_command(cmd)


def connected(
    server_version: str,
    *,
    protocol_version: int = PROTOCOL_VERSION,
    max_message_size: int | None = DEFAULT_MAX_MESSAGE_SIZE,
) -> bytes:
    """CONNECTED: answer to CONNECT. Send ``min(client protocol_version, 20)``."""
    cmd = T(type=T.CONNECTED)
    sub = cmd.connected
    sub.server_version = server_version
    sub.protocol_version = protocol_version
    if max_message_size is not None:
        sub.max_message_size = max_message_size
    return encode_command(cmd)


def ping() -> bytes:
    """PING: keep-alive probe; the peer must answer PONG."""
    cmd = T(type=T.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def pong() -> bytes:
    """PONG: answer to PING."""
    cmd = T(type=T.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


def auth_challenge(
    server_version: str,
    auth_method_name: str,
    auth_data: bytes,
    *,
    protocol_version: int = PROTOCOL_VERSION,
) -> bytes:
    """AUTH_CHALLENGE: the broker asks for fresh credentials (an expired token)."""
    cmd = T(type=T.AUTH_CHALLENGE)
    sub = cmd.authChallenge
    sub.server_version = server_version
    sub.protocol_version = protocol_version
    sub.challenge.auth_method_name = auth_method_name
    sub.challenge.auth_data = auth_data
    return encode_command(cmd)


def auth_response(
    client_version: str,
    auth_method_name: str,
    auth_data: bytes,
    *,
    protocol_version: int = PROTOCOL_VERSION,
) -> bytes:
    """AUTH_RESPONSE: the client's answer to AUTH_CHALLENGE."""
    cmd = T(type=T.AUTH_RESPONSE)
    sub = cmd.authResponse
    sub.client_version = client_version
    sub.protocol_version = protocol_version
    sub.response.auth_method_name = auth_method_name
    sub.response.auth_data = auth_data
    return encode_command(cmd)
