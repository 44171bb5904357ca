"""Generic replies: SUCCESS and ERROR, the answers of requests that have no reply of their own."""

from __future__ import annotations

from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.fields import T
from protocol.errors import ServerError
from protocol.framing import encode_command
from protocol.ids import to_u64


def success(request_id: int, *, schema: pb.Schema | None = None) -> bytes:
    """SUCCESS for SUBSCRIBE, UNSUBSCRIBE, SEEK, CLOSE_PRODUCER and CLOSE_CONSUMER."""
    cmd = T(type=T.SUCCESS)
    sub = cmd.success
    sub.request_id = to_u64(request_id)
    if schema is not None:
        sub.schema.CopyFrom(schema)
    return encode_command(cmd)


def error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """ERROR: failure of a request; ``message`` is required by the proto and always sent."""
    cmd = T(type=T.ERROR)
    sub = cmd.error
    sub.request_id = to_u64(request_id)
    sub.error = error  # type: ignore[assignment]
    sub.message = message
    return encode_command(cmd)
