"""Pulsar frames: bytes in, ``Frame`` objects out, and the reverse. No I/O.

Wire layout (all header integers big-endian u32/u16)::

    simple:  [totalSize][commandSize][BaseCommand]
    payload: [totalSize][commandSize][BaseCommand]
             ([0x0e02][brokerEntryMetadataSize][BrokerEntryMetadata])   optional, MESSAGE
             ([0x0e01][crc32c])                                          optional
             [metadataSize][MessageMetadata][payload]                    = the "entry"

``totalSize`` counts everything after itself. The CRC-32C covers the entry only.

Decoder rules (they keep a hostile or broken peer from costing memory or crashing the loop):

1. ``totalSize`` is checked against ``max_frame_size`` as soon as its 4 bytes are buffered, before
   any body is awaited; nothing is ever allocated from a declared size.
2. ``commandSize <= totalSize - 4``; the command must parse, carry a known ``type`` and the
   sub-message of that type with all its required fields.
3. SEND and MESSAGE must have a payload section whose sizes fit the frame; other commands must
   not have trailing bytes.
4. A checksum mismatch is *not* an error of the framing layer: it is reported through
   ``Frame.checksum_valid`` so the broker can answer SEND_ERROR(ChecksumError) and keep the
   connection, as Pulsar does.
5. Any violation raises ``RemoteProtocolError``; the decoder then refuses further use, because
   after a framing error the stream position is unknowable.

The receive buffer is a ``bytearray`` consumed through an offset and compacted once per
``__next__`` call that runs out of complete frames, so a frame costs one copy (its entry) and
large frames arriving in small chunks do not cause quadratic copying.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from crc32c import crc32c as _crc32c

from protocol._accel import speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import LocalProtocolError, RemoteProtocolError

#: Java broker default: maxMessageSize (5 MiB) + MESSAGE_SIZE_FRAME_PADDING (10 KiB).
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_TYPE = pb.BaseCommand.Type
PAYLOAD_TYPES = frozenset({_TYPE.Value("SEND"), _TYPE.Value("MESSAGE")})

_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")
_MAGIC_U32 = struct.Struct(">HI")
_unpack_u32 = _U32.unpack_from
_unpack_magic_u32 = _MAGIC_U32.unpack_from


def _sub_message_names() -> dict[int, str]:
    # The sub-message field number equals the Type value; derive the table from the descriptor
    # instead of writing 60 names by hand.
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    return {number: fields[number].name for number in _TYPE.values()}


#: BaseCommand.Type value -> name of the field holding that command.
SUB_MESSAGE_NAME: dict[int, str] = _sub_message_names()


# Types whose sub-message declares required fields: for them ``IsInitialized()`` on the
# sub-message proves both presence and completeness in one call. The others (PING, PONG, ...)
# are checked with HasField.
def _types_with_required_fields() -> frozenset[int]:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    found = set()
    for number in SUB_MESSAGE_NAME:
        message_type = fields[number].message_type
        assert message_type is not None  # every sub-command field is a message
        if any(field.is_required for field in message_type.fields):
            found.add(number)
    return frozenset(found)


_HAS_REQUIRED = _types_with_required_fields()


# proto2 does not validate UTF-8: upb hands back ``bytes`` for a string field whose bytes are not
# UTF-8, and a name that is ``bytes`` breaks every consumer of it (dict keys, JSON, topic parsing).
# So a command is checked, but only along the fields that can hold a string at all: a plan per
# message type lists its string fields and its message fields that contain one, and SEND, FLOW
# or MESSAGE, which contain none, cost nothing.
_StringPlan = tuple[tuple[str, bool, "_StringPlan | None"], ...]


def _string_plan(message_type: Any, seen: frozenset[str]) -> _StringPlan:
    """``message_type`` is a protobuf ``Descriptor``; ``seen`` only keeps a recursive type
    finite (PulsarApi.proto has none)."""
    plan: list[tuple[str, bool, _StringPlan | None]] = []
    for field in message_type.fields:
        repeated = bool(field.is_repeated)
        if field.type == field.TYPE_STRING:
            plan.append((field.name, repeated, None))
        elif field.type == field.TYPE_MESSAGE and field.message_type.full_name not in seen:
            inner = _string_plan(field.message_type, seen | {message_type.full_name})
            if inner:
                plan.append((field.name, repeated, inner))
    return tuple(plan)


def _string_plans() -> dict[int, _StringPlan]:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    plans = {}
    for number in SUB_MESSAGE_NAME:
        message_type = fields[number].message_type
        assert message_type is not None
        plan = _string_plan(message_type, frozenset())
        if plan:
            plans[number] = plan
    return plans


_STRING_PLANS = _string_plans()


def _require_utf8(message: Any, plan: _StringPlan, where: str) -> None:
    for name, repeated, inner in plan:
        if inner is None:
            values = getattr(message, name) if repeated else (getattr(message, name),)
            for value in values:
                if value.__class__ is not str:
                    raise RemoteProtocolError(f"{where}: field {name!r} is not valid UTF-8")
        elif repeated:
            for item in getattr(message, name):
                _require_utf8(item, inner, where)
        elif message.HasField(name):
            _require_utf8(getattr(message, name), inner, where)


@dataclass(slots=True)
class Frame:
    """One decoded frame.

    Attributes:
        command: the parsed ``BaseCommand``; read the sub-message named by its type.
        type: the ``BaseCommand.Type`` value (``command.type``).
        entry: SEND/MESSAGE only: ``[metadataSize][metadata][payload]``, exactly the bytes a
            broker stores and relays; None for other commands.
        checksum_valid: True when the frame had no checksum or the checksum matched.
        has_checksum: True when the frame carried the 0x0e01 checksum.
        entry_crc: the CRC-32C of ``entry`` when the frame's checksum covered it and matched,
            else -1. The decoder computed it to verify the checksum; the broker's storage
            takes a record's CRC from it instead of a second pass over the entry (issue #26).
    """

    command: pb.BaseCommand
    type: int
    entry: bytes | None = None
    checksum_valid: bool = True
    has_checksum: bool = False
    entry_crc: int = -1


class PyFrameDecoder:
    """Incremental decoder: ``feed`` bytes, then iterate to get every complete ``Frame``.

    Iteration stops when the buffer holds no complete frame; feed more and iterate again.
    This is the reference; ``FrameDecoder`` (end of the module) is the compiled one when built.
    """

    __slots__ = ("_buffer", "_error", "_max_frame_size", "_offset")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 8:
            raise ValueError("max_frame_size must allow at least an empty command")
        self._max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._offset = 0
        self._error: RemoteProtocolError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @property
    def buffered(self) -> int:
        """Number of received bytes not yet returned as frames."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes.

        Raises:
            RemoteProtocolError: the decoder already failed (the connection must be closed).
        """
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        # Compact here too, so a caller that stops iterating early does not keep consumed bytes.
        self._compact()
        self._buffer += data

    def entry_window(self) -> memoryview | None:
        """Where the socket may write the rest of a large SEND being assembled, so its bytes
        arrive without a copy (the compiled decoder assembles large SENDs; this reference
        buffers every frame whole, so it never has one: None)."""
        return None

    def entry_received(self, count: int) -> None:
        """``count`` bytes were written into the last ``entry_window``; never one here."""
        raise ValueError("no entry window was given")

    def __iter__(self) -> Iterator[Frame]:
        return self

    def __next__(self) -> Frame:
        if self._error is not None:
            raise RemoteProtocolError(f"decoder unusable after an earlier error: {self._error}")
        buffer = self._buffer
        offset = self._offset
        available = len(buffer) - offset
        if available >= 4:
            (total_size,) = _unpack_u32(buffer, offset)
            if total_size > self._max_frame_size or total_size < 4:
                self._fail(f"frame size {total_size} outside [4, {self._max_frame_size}]")
            if available >= 4 + total_size:
                end = offset + 4 + total_size
                self._offset = end
                try:
                    return _decode_frame(buffer, offset + 4, end)
                except RemoteProtocolError as exc:
                    self._error = exc
                    raise
        self._compact()
        raise StopIteration

    def _compact(self) -> None:
        # Drop consumed bytes. bytearray deletes a prefix by moving its start pointer when it
        # can, so this is cheap even for large buffers.
        if self._offset:
            del self._buffer[: self._offset]
            self._offset = 0

    def _fail(self, message: str) -> NoReturn:
        self._error = RemoteProtocolError(message)
        raise self._error


def _decode_frame(buffer: bytearray, start: int, end: int) -> Frame:
    """Decode the frame occupying ``buffer[start:end]`` (after the totalSize field)."""
    (command_size,) = _unpack_u32(buffer, start)
    command_end = start + 4 + command_size
    if command_end > end:
        raise RemoteProtocolError(f"command size {command_size} exceeds frame size {end - start}")
    with memoryview(buffer) as view:
        command = _parse_command(view[start + 4 : command_end])
        frame_type = command.type
        if frame_type in PAYLOAD_TYPES:
            return _decode_payload(command, frame_type, view, command_end, end)
    if command_end != end:
        raise RemoteProtocolError(
            f"{_TYPE.Name(frame_type)} frame has {end - command_end} unexpected trailing bytes"
        )
    return Frame(command, frame_type)


def _parse_command(data: memoryview) -> pb.BaseCommand:
    command = pb.BaseCommand()
    try:
        command.ParseFromString(data)  # type: ignore[arg-type]  # upb takes any buffer
    except Exception as exc:  # the upb parser raises DecodeError; treat any failure as garbage
        raise RemoteProtocolError(f"cannot parse BaseCommand: {exc}") from exc
    # A missing or unknown type reads back as CONNECT (the enum default), so presence must be
    # checked explicitly; unknown enum values of a proto2 field are not "present".
    if not command.HasField("type"):
        raise RemoteProtocolError("command without a known type")
    frame_type = command.type
    name = SUB_MESSAGE_NAME[frame_type]
    if frame_type in _HAS_REQUIRED:
        if not getattr(command, name).IsInitialized():
            raise RemoteProtocolError(
                f"{_TYPE.Name(frame_type)}: sub-message {name!r} missing or incomplete"
            )
    elif not command.HasField(name):  # type: ignore[arg-type]  # name comes from the table
        raise RemoteProtocolError(f"{_TYPE.Name(frame_type)}: sub-message {name!r} missing")
    plan = _STRING_PLANS.get(frame_type)
    if plan is not None:
        _require_utf8(getattr(command, name), plan, _TYPE.Name(frame_type))
    return command


def _decode_payload(
    command: pb.BaseCommand, frame_type: int, view: memoryview, position: int, end: int
) -> Frame:
    """Split the payload section of a SEND/MESSAGE frame starting at ``position``."""
    if end - position >= 6:
        # After a magic comes a u32: a size for 0x0e02, the checksum itself for 0x0e01.
        magic, value = _unpack_magic_u32(view, position)
        if magic == MAGIC_BROKER_ENTRY_METADATA:
            # Broker-added metadata: skipped (we never need it and relay entries without it).
            position += 6 + value
            if position > end:
                raise RemoteProtocolError(f"broker entry metadata size {value} exceeds the frame")
            magic, value = _unpack_magic_u32(view, position) if end - position >= 6 else (0, 0)
        if magic == MAGIC_CRC32C:
            position += 6
            entry = _entry_bytes(view, position, end)
            valid = _crc32c(entry) == value
            return Frame(command, frame_type, entry, valid, True, value if valid else -1)
    return Frame(command, frame_type, _entry_bytes(view, position, end))


def _entry_bytes(view: memoryview, position: int, end: int) -> bytes:
    if end - position < 4:
        raise RemoteProtocolError("payload frame without a metadata size")
    (metadata_size,) = _unpack_u32(view, position)
    if metadata_size > end - position - 4:
        raise RemoteProtocolError(
            f"metadata size {metadata_size} exceeds the {end - position - 4} bytes left"
        )
    return view[position:end].tobytes()


def encode_command(command: pb.BaseCommand) -> bytes:
    """Return the simple frame ``[totalSize][commandSize][command]``.

    Raises:
        LocalProtocolError: a required field is missing (the peer would reject the frame).
    """
    try:
        body = command.SerializeToString()
    except Exception as exc:  # EncodeError: a required field is missing
        raise LocalProtocolError(f"cannot encode command: {exc}") from exc
    size = len(body)
    return _U32_PAIR.pack(size + 4, size) + body


def encode_payload_command(
    command: pb.BaseCommand, entry: bytes | memoryview, *, checksum: bool = True
) -> bytes:
    """Return a payload frame (SEND/MESSAGE) carrying ``entry`` unchanged.

    ``entry`` is ``[metadataSize][metadata][payload]``; with ``checksum`` the 0x0e01 magic and the
    CRC-32C of the entry are inserted before it (clients accept frames without it, but a
    checksum lets them detect corruption).

    Raises:
        LocalProtocolError: a required field is missing or ``entry`` has no metadata size.
    """
    if len(entry) < 4:
        raise LocalProtocolError("entry must start with a 4-byte metadata size")
    try:
        body = command.SerializeToString()
    except Exception as exc:  # EncodeError: a required field is missing
        raise LocalProtocolError(f"cannot encode command: {exc}") from exc
    size = len(body)
    if checksum:
        header = _U32_PAIR.pack(size + 10 + len(entry), size)
        trailer = _MAGIC_U32.pack(MAGIC_CRC32C, _crc32c(entry))
        return b"".join((header, body, trailer, entry))
    return b"".join((_U32_PAIR.pack(size + 4 + len(entry), size), body, entry))


# The compiled decoder (protocol/_accel.py) gives the same frames, errors and messages; only a
# SEND it recognised carries, as ``command``, an object with ``type`` and ``send`` ready and the
# rest of the ``BaseCommand`` API parsed from the command bytes on first use.
_speedups = speedups()
if TYPE_CHECKING:
    FrameDecoder = PyFrameDecoder
elif _speedups is not None:
    FrameDecoder = _speedups.bind_framing(Frame, _decode_frame)
else:
    FrameDecoder = PyFrameDecoder
