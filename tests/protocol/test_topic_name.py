"""protocol.topic_name: accepted spellings, partitions, rejections."""

from __future__ import annotations

import pytest

from protocol.topic_name import InvalidTopicNameError, TopicName


@pytest.mark.parametrize(
    "spelling",
    ["my-topic", "public/default/my-topic", "persistent://public/default/my-topic"],
)
def test_spellings_complete_to_the_full_name(spelling: str) -> None:
    name = TopicName.parse(spelling)
    assert name.full_name == "persistent://public/default/my-topic"
    assert (name.domain, name.tenant, name.namespace, name.local_name) == (
        "persistent",
        "public",
        "default",
        "my-topic",
    )
    assert name.namespace_name == "public/default"
    assert str(name) == name.full_name


def test_partition_suffix() -> None:
    name = TopicName.parse("persistent://t/ns/orders-partition-3")
    assert name.partition == 3
    assert name.is_partition
    assert name.partitioned_topic_name == "persistent://t/ns/orders"
    assert name.full_name == "persistent://t/ns/orders-partition-3"


def test_not_a_partition() -> None:
    for local in ("orders", "orders-partition-x", "-partition-1", "orders-partition-"):
        name = TopicName.parse(f"t/ns/{local}")
        assert name.partition == -1
        assert name.partitioned_topic_name == name.full_name


def test_with_partition() -> None:
    base = TopicName.parse("t/ns/orders")
    assert base.with_partition(2).full_name == "persistent://t/ns/orders-partition-2"
    assert base.with_partition(2).with_partition(0).local_name == "orders-partition-0"
    with pytest.raises(ValueError):
        base.with_partition(-1)


def test_non_persistent_rejected_clearly() -> None:
    with pytest.raises(InvalidTopicNameError, match="only persistent"):
        TopicName.parse("non-persistent://public/default/t")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "persistent://public/default/",
        "persistent://public/default",
        "persistent://prop/cluster/ns/topic",
        "a/b",
        "a/b/c/d",
        "persistent:///ns/t",
        "persistent://te nant/ns/t",
        "http://public/default/t",
    ],
)
def test_malformed_rejected(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(bad)


def test_error_is_a_value_error() -> None:
    assert issubclass(InvalidTopicNameError, ValueError)


def test_hashable_and_equal_by_value() -> None:
    assert TopicName.parse("x") == TopicName.parse("public/default/x")
    assert len({TopicName.parse("x"), TopicName.parse("persistent://public/default/x")}) == 1
