"""broker.storage.paths.topic_directory / topics_of_namespace on a real file system.

Every accepted name gets its own folder, created for real, exactly one level inside its namespace
folder; listing the namespace maps every folder back to its name; anything else found there
(stray files, spellings the broker never writes) is not listed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.service import BrokerService
from broker.storage.paths import namespace_directory, topic_directory
from protocol.topic_name import InvalidTopicNameError, NamespaceName, TopicName
from tests.helpers import broker_config

NAMESPACES = [NamespaceName("public", "default"), NamespaceName("Public", "Default")]
# Every code point (controls and surrogates too), and a small alphabet where escapes, case and
# dot segments collide if the mapping is careless.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=120)
tricky_text = st.text(st.sampled_from(list("./\\%:-_~ aAfF24eE\x00é\u212a")), max_size=8)
local_names = st.lists(st.one_of(tricky_text, any_text), max_size=25)


def _accepted(namespace: NamespaceName, local_names: list[str]) -> set[TopicName]:
    accepted = set()
    for local in local_names:
        try:
            accepted.add(TopicName(namespace.tenant, namespace.namespace, local))
        except InvalidTopicNameError:
            continue
    return accepted


def _leaf_directories(root: Path) -> set[Path]:
    """Every directory under ``root`` with no directory inside it (what mkdir made)."""
    if not root.exists():
        return set()
    return {Path(top) for top, dirs, _ in os.walk(root) if not dirs}


@settings(max_examples=150, deadline=None)
@given(local_names, local_names)
def test_each_accepted_name_gets_its_own_folder_inside_its_namespace(
    first: list[str], second: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        service = BrokerService(broker_config(data))
        by_namespace = {
            NAMESPACES[0]: _accepted(NAMESPACES[0], first),
            NAMESPACES[1]: _accepted(NAMESPACES[1], second),
        }
        for namespace, topics in by_namespace.items():
            home = namespace_directory(data, namespace)
            for topic in topics:
                directory = topic_directory(data, topic)
                assert directory.parent == home
                directory.mkdir(parents=True)  # fails if another name already made it
                assert directory.resolve().parent == home.resolve()
        expected = {topic_directory(data, t) for topics in by_namespace.values() for t in topics}
        assert _leaf_directories(data / "persistent") == expected
        for namespace, topics in by_namespace.items():
            assert service.topics_of_namespace(namespace) == sorted(t.full_name for t in topics)


def test_listing_skips_what_the_broker_never_writes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = BrokerService(broker_config(data))
    namespace = NamespaceName("public", "default")
    real = TopicName.parse("Orders")
    topic_directory(data, real).mkdir(parents=True)
    home = namespace_directory(data, namespace)
    for stray in ("Orders", "%4frders", "%2E%2E", "a%2Fb", "%00", "%zz"):
        (home / stray).mkdir()
    (home / "a-file").write_bytes(b"")
    assert service.topics_of_namespace(namespace) == ["persistent://public/default/Orders"]


def test_layout(tmp_path: Path) -> None:
    topic = TopicName.parse("persistent://My-Tenant/ns:1/Orders é")
    assert topic_directory(tmp_path, topic) == (
        tmp_path / "persistent" / "%4Dy-%54enant" / "ns%3A1" / "%4Frders%20%C3%A9"
    )
