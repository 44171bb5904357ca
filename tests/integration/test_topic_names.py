"""Unsafe topic and namespace names over the wire and over REST (issue #10, item 2).

``.``, ``..``, path separators and control characters are refused on every command that names a
topic or a namespace (InvalidTopicName on the binary protocol, 412 on REST), the connection stays
usable, and nothing is written outside ``dataDir/persistent/<tenant>/<namespace>/<topic>/``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest

from broker.storage.lock import LOCKS_FILE_NAME
from broker.storage.paths import topic_directory
from protocol import commands, pb
from protocol.enums import SubType
from protocol.errors import ServerError
from protocol.framing import Frame
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession

pytestmark = [pytest.mark.integration]
T = pb.BaseCommand.Type

UNSAFE_TOPICS = [
    "persistent://public/default/..",
    "persistent://public/default/.",
    "public/default/..",
    "..",
    ".",
    "persistent://public/../x",
    "persistent://../default/x",
    "persistent://public/default/a\\b",
    "persistent://public/default/nul\x00",
    "persistent://public/default/new\nline",
    "persistent://public/default/" + "x" * 300,
]
UNSAFE_NAMESPACES = [
    "public/..",
    "../default",
    ".",
    "public",
    "public/default/x",
    "public/de fault",
]


def _schema() -> pb.Schema:
    return pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)


def _get_or_create_schema(topic: str, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = request_id
    cmd.getOrCreateSchema.topic = topic
    cmd.getOrCreateSchema.schema.CopyFrom(_schema())
    return commands.encode_command(cmd)


def _error_code(frame: Frame) -> int:
    """The ServerError a reply carries, whatever its type."""
    command = frame.command
    if frame.type == T.ERROR:
        return command.error.error
    if frame.type == T.LOOKUP_RESPONSE:
        assert command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
        return command.lookupTopicResponse.error
    if frame.type == T.PARTITIONED_METADATA_RESPONSE:
        return command.partitionMetadataResponse.error
    if frame.type == T.GET_SCHEMA_RESPONSE:
        return command.getSchemaResponse.error_code
    if frame.type == T.GET_OR_CREATE_SCHEMA_RESPONSE:
        return command.getOrCreateSchemaResponse.error_code
    raise AssertionError(f"unexpected reply type {frame.type}")


def _requests_naming(topic: str, first_id: int) -> list[tuple[str, bytes, int]]:
    """Every command that names a topic, each with its own request id."""
    ids = range(first_id, first_id + 6)
    return [
        ("LOOKUP", commands.lookup(topic, ids[0]), ids[0]),
        ("PARTITIONED_METADATA", commands.partitioned_metadata(topic, ids[1]), ids[1]),
        ("PRODUCER", commands.producer(topic, ids[2], ids[2]), ids[2]),
        (
            "SUBSCRIBE",
            commands.subscribe(topic, "sub", ids[3], ids[3], SubType.Exclusive),
            ids[3],
        ),
        ("GET_SCHEMA", commands.get_schema(topic, ids[4]), ids[4]),
        ("GET_OR_CREATE_SCHEMA", _get_or_create_schema(topic, ids[5]), ids[5]),
    ]


def _files_and_leaf_dirs(root: Path) -> tuple[set[Path], set[Path]]:
    files: set[Path] = set()
    leaves: set[Path] = set()
    for top, dirs, names in os.walk(root):
        files |= {Path(top) / name for name in names}
        if not dirs:
            leaves.add(Path(top))
    return files, leaves


def _assert_only_inside(data: Path, allowed_topics: list[str]) -> None:
    """Under persistent/, only the folders of ``allowed_topics`` (at depth 3) and files in them."""
    allowed = {topic_directory(data, TopicName.parse(t)) for t in allowed_topics}
    # Besides: each namespace's (empty, advisory) lock table, a name no topic folder takes.
    locks = {a.parent / LOCKS_FILE_NAME for a in allowed}
    files, leaves = _files_and_leaf_dirs(data / "persistent")
    assert files, "the valid topic wrote its segment"
    for path in (files - locks) | leaves:
        assert any(path == a or a in path.parents for a in allowed), path


def test_unsafe_topic_names_are_refused_on_every_command(broker: BrokerThread) -> None:
    data = broker.config.data_path
    valid = "persistent://public/default/valid-after-refusals"
    with RawSession(broker.port) as session:
        request_id = 1
        for topic in UNSAFE_TOPICS:
            for command, frame, rid in _requests_naming(topic, request_id):
                reply = session.request(frame, rid)
                assert _error_code(reply) == ServerError.InvalidTopicName, (command, topic)
            request_id += 10
        for namespace in UNSAFE_NAMESPACES:
            reply = session.request(
                commands.get_topics_of_namespace(namespace, request_id), request_id
            )
            assert reply.type == T.ERROR, namespace
            assert reply.command.error.error == ServerError.InvalidTopicName
            request_id += 1

        # The same connection still serves a valid producer end to end.
        assert session.is_usable()
        success = session.request(commands.producer(valid, 900, 900, producer_name="p"), 900)
        assert success.type == T.PRODUCER_SUCCESS
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        session.send(commands.send(900, 0, encode_entry(metadata, b"x")))
        session.take(lambda frame: frame.type == T.SEND_RECEIPT)
        listed = session.request(commands.get_topics_of_namespace("public/default", 901), 901)
        assert list(listed.command.getTopicsOfNamespaceResponse.topics) == [valid]

    _assert_only_inside(data, [valid])
    assert {p.name for p in data.iterdir()} <= {"metadata", "persistent"}
    assert not (data / "metadata" / "schemas").exists()  # no schema stored for any of them


def test_official_client_cannot_create_dot_dot(broker: BrokerThread) -> None:
    # The C++ client (4.2.0) retries InvalidTopicName until its operation timeout, as it would
    # against Pulsar (broker/errors.py), so the refusal surfaces as a Timeout.
    client = new_client(broker.url, operation_timeout=1)
    try:
        for topic in ("persistent://public/default/..", "persistent://public/default/."):
            with pytest.raises(pulsar.Timeout):
                client.create_producer(topic)
    finally:
        close_client(client)
    assert not (broker.config.data_path / "persistent").exists()


# ---------------------------------------------------------------------------- REST


def _status(url: str, method: str = "GET", body: bytes | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=body)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            status: int = reply.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/v2/persistent/public/default/../stats"),
        ("GET", "/admin/v2/persistent/public/default/./stats"),
        ("GET", "/admin/v2/persistent/public/default/%2E%2E/stats"),
        ("GET", "/admin/v2/persistent/public/default/%2e/stats"),
        ("GET", "/admin/v2/persistent/public/default/a%5Cb/stats"),
        ("GET", "/admin/v2/persistent/public/default/a%00b/stats"),
        ("GET", "/admin/v2/persistent/public/default/%FF/stats"),
        ("GET", "/admin/v2/persistent/public/%2E%2E/x/stats"),
        ("GET", "/admin/v2/persistent/p%2Fq/default/x/stats"),
        ("PUT", "/admin/v2/persistent/public/default/../unload"),
        ("DELETE", "/admin/v2/persistent/public/default/.."),
        ("POST", "/admin/v2/persistent/public/default/../deduplicationEnabled"),
        ("GET", "/admin/v2/persistent/public/.."),
        ("PUT", "/admin/v2/namespaces/public/.."),
        ("PUT", "/admin/v2/namespaces/%2E%2E/ns"),
        ("PUT", "/admin/v2/namespaces/pub%20lic/ns"),
        ("PUT", "/admin/v2/namespaces/public/n%2Fs"),
        ("GET", "/admin/v2/namespaces/.."),
        ("POST", "/admin/v2/namespaces/public/../deduplication"),
    ],
)
def test_rest_refuses_unsafe_names_with_412(broker: BrokerThread, method: str, path: str) -> None:
    body = b"true" if method == "POST" else None
    assert _status(broker.http + path, method, body) == 412
    assert not (broker.config.data_path / "persistent").exists()
    assert _get_json(broker.http + "/admin/v2/tenants") == ["public", "pulsar"]
    assert _get_json(broker.http + "/admin/v2/namespaces/public") == [
        "public/default",
        "public/functions",
    ]


def test_rest_decodes_names_once(broker: BrokerThread) -> None:
    """``%`` and spaces round-trip: the REST path names the same topic as the binary protocol."""
    names = ["per%cent", "with space", "Upper", "é"]
    with RawSession(broker.port) as session:
        for index, local in enumerate(names):
            topic = f"persistent://public/default/{local}"
            reply = session.request(commands.producer(topic, index, index), index)
            assert reply.type == T.PRODUCER_SUCCESS
    for local in names:
        assert (
            _status(f"{broker.http}/admin/v2/persistent/public/default/{quote(local)}/stats") == 200
        )
    # Pulsar reads the topic segment with URLDecoder: "+" is a space there.
    assert _status(f"{broker.http}/admin/v2/persistent/public/default/with+space/stats") == 200
    assert _status(f"{broker.http}/admin/v2/persistent/public/default/per%cent/stats") == 412
    listed = _get_json(f"{broker.http}/admin/v2/persistent/public/default")
    assert listed == sorted(f"persistent://public/default/{local}" for local in names)
