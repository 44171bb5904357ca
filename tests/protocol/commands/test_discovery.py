"""Builders of protocol.commands.discovery: each one round-trips with the right fields."""

from __future__ import annotations

import pytest

from protocol import commands
from protocol.enums import TopicListMode
from protocol.errors import LocalProtocolError, ServerError
from tests.protocol.commands.frames import T, sub


def test_partitioned_metadata() -> None:
    request = sub(commands.partitioned_metadata("persistent://a/b/c", 1), T.PARTITIONED_METADATA)
    assert (request.topic, request.request_id) == ("persistent://a/b/c", 1)


def test_partitioned_metadata_response() -> None:
    ok = sub(commands.partitioned_metadata_response(2, 4), T.PARTITIONED_METADATA_RESPONSE)
    assert (ok.request_id, ok.partitions, ok.response) == (2, 4, ok.Success)
    zero = sub(commands.partitioned_metadata_response(2), T.PARTITIONED_METADATA_RESPONSE)
    assert zero.HasField("partitions")
    assert zero.partitions == 0
    failed = sub(
        commands.partitioned_metadata_response(
            2, error=ServerError.TopicNotFound, message="no such namespace"
        ),
        T.PARTITIONED_METADATA_RESPONSE,
    )
    assert failed.response == failed.Failed
    assert failed.error == ServerError.TopicNotFound
    assert failed.message == "no such namespace"


def test_lookup() -> None:
    request = sub(commands.lookup("persistent://a/b/c", 9), T.LOOKUP)
    assert (request.topic, request.request_id, request.authoritative) == (
        "persistent://a/b/c",
        9,
        False,
    )
    listener = sub(commands.lookup("t", 1, advertised_listener_name="int"), T.LOOKUP)
    assert listener.advertised_listener_name == "int"


def test_lookup_response_connect() -> None:
    response = sub(
        commands.lookup_response(4, "pulsar://localhost:6650", proxy_through_service_url=True),
        T.LOOKUP_RESPONSE,
    )
    assert response.response == response.Connect
    assert response.brokerServiceUrl == "pulsar://localhost:6650"
    assert response.authoritative
    assert response.proxy_through_service_url
    assert response.request_id == 4


def test_lookup_response_redirect_and_failure() -> None:
    redirect = sub(commands.lookup_response(1, "pulsar://b:1", redirect=True), T.LOOKUP_RESPONSE)
    assert redirect.response == redirect.Redirect
    failed = sub(
        commands.lookup_response(1, error=ServerError.ServiceNotReady, message="no listener"),
        T.LOOKUP_RESPONSE,
    )
    assert failed.response == failed.Failed
    assert failed.error == ServerError.ServiceNotReady
    assert failed.message == "no listener"
    with pytest.raises(LocalProtocolError):
        commands.lookup_response(1)


def test_get_topics_of_namespace() -> None:
    request = sub(
        commands.get_topics_of_namespace("public/default", 3, mode=TopicListMode.ALL),
        T.GET_TOPICS_OF_NAMESPACE,
    )
    assert (request.namespace, request.request_id, request.mode) == ("public/default", 3, 2)
    response = sub(
        commands.get_topics_of_namespace_response(3, ["persistent://public/default/a"]),
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    )
    assert list(response.topics) == ["persistent://public/default/a"]
    assert not response.filtered
    assert response.changed
