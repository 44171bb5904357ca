"""protocol.errors: ServerError mirrors the proto enum; exception hierarchy."""

from __future__ import annotations

from protocol import pb
from protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError, ServerError


def test_server_error_equals_proto_enum() -> None:
    proto = {value.name: value.number for value in pb.ServerError.DESCRIPTOR.values}
    assert {member.name: member.value for member in ServerError} == proto


def test_server_error_values_are_unique_and_dense() -> None:
    assert [member.value for member in ServerError] == list(range(26))
    assert ServerError.ProducerFenced.value == 25


def test_exception_hierarchy() -> None:
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)
    assert issubclass(ProtocolError, Exception)
