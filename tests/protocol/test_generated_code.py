"""protocol/_pb: committed generated code is fresh, imports silently, uses the official names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import protocol
from protocol import pb

PB_DIR = Path(protocol.__file__).parent / "_pb"

# protoc stamps its own version into the module; a newer grpcio-tools must not make the
# committed code look stale when the descriptor itself is unchanged.
_VERSION_STAMP = re.compile(
    r"# Protobuf Python Version: .*?\n|ValidateProtobufRuntimeVersion\(.*?\)\n", re.DOTALL
)


def _normalized(path: Path) -> str:
    return _VERSION_STAMP.sub("", path.read_text())


def test_committed_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "protocol._generate", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        cwd=Path(protocol.__file__).parent.parent,
    )
    for name in ("PulsarApi_pb2.py", "PulsarApi_pb2.pyi"):
        assert _normalized(tmp_path / name) == _normalized(PB_DIR / name), (
            f"{name} is stale: run `make proto`"
        )


def test_import_emits_no_warning() -> None:
    # A fresh interpreter, so the import really runs (gencode/runtime version check included).
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import protocol; protocol.pb.BaseCommand()"],
        capture_output=True,
        text=True,
        cwd=Path(protocol.__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_package_and_field_names_are_official() -> None:
    assert pb.DESCRIPTOR.package == "pulsar.proto"
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_name
    for name in (
        "lookupTopic",
        "lookupTopicResponse",
        "partitionMetadata",
        "partitionMetadataResponse",
        "redeliverUnacknowledgedMessages",
        "getLastMessageId",
        "active_consumer_change",
        "topicMigrated",
    ):
        assert name in fields
    assert {"ledgerId", "entryId"} <= set(pb.MessageIdData.DESCRIPTOR.fields_by_name)
    subscribe = pb.CommandSubscribe.DESCRIPTOR.fields_by_name
    assert {"subType", "initialPosition", "keySharedMeta"} <= set(subscribe)


def test_sub_message_field_number_equals_type_value() -> None:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    for value in pb.BaseCommand.Type.values():
        assert fields[value].message_type is not None


def test_selected_wire_facts() -> None:
    # Spot checks of numbers/defaults the broker relies on.
    metadata = pb.MessageMetadata.DESCRIPTOR.fields_by_name
    assert metadata["num_messages_in_batch"].number == 11
    assert metadata["highest_sequence_id"].number == 24
    assert pb.MessageIdData().partition == -1
    assert pb.MessageIdData().batch_index == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.CommandSubscribe().durable is True
    assert pb.CommandGetTopicsOfNamespaceResponse().changed is True
    assert pb.CommandSend.DESCRIPTOR.fields_by_name["highest_sequence_id"].number == 6
    assert pb.KeySharedMeta.DESCRIPTOR.fields_by_name["hashRanges"].number == 3
    assert pb.ProtocolVersion.Value("v20") == 20
