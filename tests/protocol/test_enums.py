"""protocol.enums: every IntEnum mirrors its proto enum exactly."""

from __future__ import annotations

from enum import IntEnum

import pytest
from google.protobuf.descriptor import EnumDescriptor

from protocol import enums, pb


@pytest.mark.parametrize(
    ("mirror", "descriptor"),
    [
        (enums.SubType, pb.CommandSubscribe.SubType.DESCRIPTOR),
        (enums.InitialPosition, pb.CommandSubscribe.InitialPosition.DESCRIPTOR),
        (enums.ProducerAccessMode, pb.ProducerAccessMode.DESCRIPTOR),
        (enums.AckType, pb.CommandAck.AckType.DESCRIPTOR),
        (enums.AckValidationError, pb.CommandAck.ValidationError.DESCRIPTOR),
        (enums.CompressionType, pb.CompressionType.DESCRIPTOR),
        (enums.KeySharedMode, pb.KeySharedMode.DESCRIPTOR),
        (enums.TopicListMode, pb.CommandGetTopicsOfNamespace.Mode.DESCRIPTOR),
    ],
)
def test_mirror_matches_proto(mirror: type[IntEnum], descriptor: EnumDescriptor) -> None:
    proto = {value.name: value.number for value in descriptor.values}
    assert {member.name: member.value for member in mirror} == proto
