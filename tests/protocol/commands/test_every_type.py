"""Every BaseCommand type (2..68) survives encode -> decode, builder or not."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from protocol import pb
from protocol.framing import SUB_MESSAGE_NAME, encode_command, encode_payload_command
from tests.protocol.commands.frames import T, decode_one, entry


def _fill_required(message: Message) -> None:
    for field in message.DESCRIPTOR.fields:
        if not field.is_required:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            _fill_required(getattr(message, field.name))
        elif field.type == FieldDescriptor.TYPE_ENUM:
            assert field.enum_type is not None
            setattr(message, field.name, field.enum_type.values[-1].number)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, f"{field.name}-value")
        elif field.type == FieldDescriptor.TYPE_BYTES:
            setattr(message, field.name, b"\x00\xff")
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(message, field.name, True)
        else:
            setattr(message, field.name, field.number + 40)


@pytest.mark.parametrize("command_type", sorted(T.Type.values()))
def test_every_command_type_round_trips(command_type: int) -> None:
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    inner = getattr(command, SUB_MESSAGE_NAME[command_type])
    inner.SetInParent()
    _fill_required(inner)
    if command_type in (T.SEND, T.MESSAGE):
        data = encode_payload_command(command, entry())
    else:
        data = encode_command(command)
    frame = decode_one(data)
    assert frame.type == command_type
    assert frame.command == command


def test_types_cover_2_to_68() -> None:
    values = set(T.Type.values())
    assert min(values) == 2
    assert max(values) == 68
    assert values == set(range(2, 41)) | set(range(50, 69))
