"""Builders of protocol.commands.replies: SUCCESS and ERROR round-trip with the right fields."""

from __future__ import annotations

import pytest

from protocol import commands, pb
from protocol.errors import ServerError
from tests.protocol.commands.frames import T, sub


def test_success() -> None:
    assert sub(commands.success(12), T.SUCCESS).request_id == 12
    schema = pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json)
    assert sub(commands.success(1, schema=schema), T.SUCCESS).schema == schema


@pytest.mark.parametrize("code", list(ServerError))
def test_error_every_server_error(code: ServerError) -> None:
    error = sub(commands.error(3, code, f"failed: {code.name}"), T.ERROR)
    assert error.request_id == 3
    assert ServerError(error.error) is code
    assert error.message == f"failed: {code.name}"


def test_error_with_empty_message_still_sets_it() -> None:
    error = sub(commands.error(3, ServerError.UnknownError, ""), T.ERROR)
    assert error.HasField("message")
