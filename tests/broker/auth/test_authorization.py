"""Authorizer: Pulsar's proxy rules (``proxyRoles``, ``original_principal``: both roles must be
allowed) and the consume permission a PRODUCER's initial subscription needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.auth.authorization import Authorizer
from broker.auth.store import AuthPolicyStore
from broker.config import BrokerConfig
from broker.errors import AuthorizationError
from protocol.topic_name import TopicName

TOPIC = TopicName.parse("persistent://acme/ns/t")


@pytest.fixture
async def authorizer(tmp_path: Path) -> Authorizer:
    store = AuthPolicyStore(tmp_path)
    await store.grant("acme/ns", "proxy", ["produce", "consume"])
    await store.grant("acme/ns", "writer", ["produce"])
    await store.grant("acme/ns", "both", ["produce", "consume"])
    config = BrokerConfig(authorization_enabled=True, proxy_roles="proxy, proxy2")
    return Authorizer(config, store)


def test_original_principal_rules(authorizer: Authorizer) -> None:
    assert authorizer.original_principal_error("proxy", "writer") is None
    assert authorizer.original_principal_error("writer", None) is None
    assert authorizer.original_principal_error("proxy", None) is not None  # must name one
    assert authorizer.original_principal_error("proxy", "proxy2") is not None  # not a proxy
    assert authorizer.original_principal_error("writer", "both") is not None  # not a proxy
    assert authorizer.original_principal_error("writer", "writer") is not None  # Pulsar 3.0+


def test_without_proxy_roles_no_role_may_name_an_original_principal(tmp_path: Path) -> None:
    plain = Authorizer(BrokerConfig(authorization_enabled=True), AuthPolicyStore(tmp_path))
    assert plain.original_principal_error("anyone", "someone") is not None
    assert plain.original_principal_error("anyone", None) is None


def test_both_the_proxy_and_the_original_principal_must_be_allowed(
    authorizer: Authorizer,
) -> None:
    authorizer.check_produce("proxy", TOPIC, original="writer")
    with pytest.raises(AuthorizationError):
        authorizer.check_consume("proxy", TOPIC, original="writer")  # writer may not consume
    with pytest.raises(AuthorizationError):
        authorizer.check_produce("stranger", TOPIC, original="writer")
    with pytest.raises(AuthorizationError):
        authorizer.check_lookup("proxy", TOPIC, original="stranger")
    with pytest.raises(AuthorizationError):
        authorizer.check_list_topics("proxy", "acme/ns", original="stranger")
    authorizer.check_list_topics("proxy", "acme/ns", original="writer")


def test_an_initial_subscription_needs_consume_too(authorizer: Authorizer) -> None:
    authorizer.check_produce("writer", TOPIC)
    with pytest.raises(AuthorizationError, match="Produce"):
        authorizer.check_produce("writer", TOPIC, initial_subscription="s")
    authorizer.check_produce("both", TOPIC, initial_subscription="s")
