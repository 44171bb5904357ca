"""protocol.topic_name: accepted spellings, partitions, the naming rules, folder names."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.topic_name import (
    MAX_FOLDER_NAME_BYTES,
    InvalidTopicNameError,
    NamespaceName,
    TopicName,
    check_tenant_name,
    folder_name,
    part_from_folder_name,
)


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


def test_non_persistent_accepted_when_asked() -> None:
    name = TopicName.parse("non-persistent://public/default/t", allow_non_persistent=True)
    assert name.domain == "non-persistent"
    assert name.full_name == "non-persistent://public/default/t"
    assert name.with_partition(1).full_name == "non-persistent://public/default/t-partition-1"


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


# ---------------------------------------------------------------------------- naming rules


@pytest.mark.parametrize(
    "spelling",
    [
        "persistent://public/default/..",
        "persistent://public/default/.",
        "public/default/..",
        "..",
        ".",
        "persistent://../default/t",
        "persistent://public/../t",
        "persistent://./default/t",
        "persistent://public/./t",
        "persistent:///default/t",
        "persistent://public//t",
        "persistent://public/default/a\\b",
        "persistent://public/default/\\",
        "persistent://public/default/a\x00b",
        "persistent://public/default/line\nbreak",
        "persistent://public/default/tab\t",
        "persistent://public/default/del\x7f",
        "persistent://public/default/c1\x85",
        "persistent://public/default/ls\u2028",
        "persistent://public/default/lone\ud800surrogate",
        "persistent://pub lic/default/t",
        "persistent://public/déf/t",
        "persistent://public/default\\x/t",
        "persistent://public/default/" + "a" * 256,
        "persistent://public/default/" + "A" * 86,
        "persistent://public/default/" + "é" * 43,
        "persistent://" + "t" * 256 + "/default/x",
        "PERSISTENT://public/default/t",
    ],
)
def test_unsafe_or_invalid_names_refused(spelling: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(spelling)


@pytest.mark.parametrize(
    "local",
    [
        "...",
        ".hidden",
        "trailing.",
        "a..b",
        "with space",
        "per%cent",
        "%2E%2E",
        "%41",
        "Orders",
        "orders",
        "a:b=c~d+e",
        "é",
        "日本語のトピック",
        "emoji-🚀",
        "zero\u200bwidth",
        "a" * 255,
        "A" * 85,
    ],
)
def test_names_pulsar_accepts_are_accepted(local: str) -> None:
    name = TopicName.parse(f"persistent://public/default/{local}")
    assert name.local_name == local
    assert part_from_folder_name(folder_name(local)) == local


def test_tenant_and_namespace_follow_named_entity() -> None:
    name = TopicName.parse("persistent://Te_n-a=n:t.1/n.s/t")
    assert (name.tenant, name.namespace) == ("Te_n-a=n:t.1", "n.s")
    for bad in ("ten ant", "tenänt", "a/b", "", ".", "..", "a\\b", "a%2Fb"):
        with pytest.raises(InvalidTopicNameError):
            TopicName(bad, "ns", "t")
        with pytest.raises(InvalidTopicNameError):
            TopicName("tenant", bad, "t")


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName("public", "default", "..")
    with pytest.raises(InvalidTopicNameError):
        TopicName("public", "default", "t", domain="in-memory")
    # Issue #14: non-persistent names exist (parse accepts them only when asked to).
    assert TopicName("public", "default", "t", domain="non-persistent").full_name == (
        "non-persistent://public/default/t"
    )


def test_partition_name_too_long_is_refused() -> None:
    base = TopicName.parse("a" * 250)
    with pytest.raises(InvalidTopicNameError, match="too long"):
        base.with_partition(0)


def test_error_message_is_clipped_and_escaped() -> None:
    with pytest.raises(InvalidTopicNameError) as caught:
        TopicName.parse("persistent://public/default/" + "\x00" * 10_000)
    message = str(caught.value)
    assert "\x00" not in message
    assert len(message) < 1000


def test_namespace_name() -> None:
    assert str(NamespaceName.parse("public/default")) == "public/default"
    assert NamespaceName.parse("public/default") == NamespaceName("public", "default")
    for bad in ("public", "public/default/x", "public/..", "./default", "public/", "a b/c", ""):
        with pytest.raises(InvalidTopicNameError):
            NamespaceName.parse(bad)


def test_check_tenant_name() -> None:
    check_tenant_name("my-tenant")
    for bad in ("", ".", "..", "a/b", "a b"):
        with pytest.raises(InvalidTopicNameError):
            check_tenant_name(bad)


# ---------------------------------------------------------------------------- folder names


@pytest.mark.parametrize(
    ("part", "folder"),
    [
        ("orders", "orders"),
        ("Orders", "%4Frders"),
        ("a b", "a%20b"),
        ("%", "%25"),
        ("a/b", "a%2Fb"),
        ("é", "%C3%A9"),
        ("a:b=c~", "a%3Ab%3Dc%7E"),
        ("x-y_z.0", "x-y_z.0"),
    ],
)
def test_folder_name_spelling(part: str, folder: str) -> None:
    assert folder_name(part) == folder
    assert part_from_folder_name(folder) == part


@pytest.mark.parametrize(
    "folder",
    ["Orders", "%4frders", "%", "%zz", "%FF", "a%2", "a b", "é", "~", "%6F"],
)
def test_folder_spellings_never_written_are_not_read_back(folder: str) -> None:
    # Only the one canonical spelling maps back: e.g. "%6F" is "o", which is written "o".
    assert part_from_folder_name(folder) is None


# ---------------------------------------------------------------------------- properties

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)
# Every code point, surrogates and control characters included.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
# A small alphabet where escapes, case and dot segments collide if the mapping is careless.
tricky_text = st.text(
    st.sampled_from(list("./\\%:=-_~+ aAbBfF0249eE\x00\n\u2028éÉßẞKk\u212a\u0130\u0131")),
    max_size=10,
)
segment = st.one_of(tricky_text, st.sampled_from([".", "..", "", "public", "default"]))
topic_spelling = st.one_of(
    any_text,
    tricky_text,
    st.builds(lambda t, n, local: f"persistent://{t}/{n}/{local}", segment, segment, any_text),
    st.builds(lambda t, n, local: f"{t}/{n}/{local}", segment, segment, tricky_text),
)


def _assert_safe_folder(folder: str) -> None:
    assert folder not in (".", "..", "")
    assert folder.isascii()
    assert not set(folder) & {"/", "\\", "\x00"}
    assert len(folder.encode()) <= MAX_FOLDER_NAME_BYTES


@PROPERTY_SETTINGS
@given(topic_spelling)
def test_any_string_is_refused_or_maps_to_safe_folders(spelling: str) -> None:
    try:
        name = TopicName.parse(spelling)
    except InvalidTopicNameError:
        return
    for part in (name.tenant, name.namespace, name.local_name):
        folder = folder_name(part)
        _assert_safe_folder(folder)
        assert part_from_folder_name(folder) == part
    assert TopicName.parse(name.full_name) == name


def _lookalikes(names: list[str]) -> list[str]:
    """Each name with its case variants and with spellings that look like an encoded name."""
    out = set()
    for name in names:
        encoded = quote(name, safe="", errors="surrogatepass")
        out |= {name, name.upper(), name.lower(), name.swapcase(), encoded, encoded.lower()}
    return sorted(out)


@PROPERTY_SETTINGS
@given(st.lists(st.one_of(tricky_text, any_text), max_size=10).map(_lookalikes))
def test_no_two_accepted_names_share_a_folder_even_ignoring_case(locals_: list[str]) -> None:
    accepted: list[str] = []
    for local in locals_:
        try:
            accepted.append(TopicName("public", "default", local).local_name)
        except InvalidTopicNameError:
            continue
    folders = {folder_name(local).lower() for local in accepted}
    assert len(folders) == len(accepted)


@PROPERTY_SETTINGS
@given(any_text)
def test_any_namespace_string_is_refused_or_valid(spelling: str) -> None:
    try:
        namespace = NamespaceName.parse(spelling)
    except InvalidTopicNameError:
        return
    assert str(namespace) == spelling
    for part in (namespace.tenant, namespace.namespace):
        _assert_safe_folder(folder_name(part))


@PROPERTY_SETTINGS
@given(st.one_of(any_text, st.text(st.sampled_from(list("%0123456789abcdefABCDEF.-_ gz")))))
def test_reading_any_folder_name_back_is_exact_or_none(folder: str) -> None:
    part = part_from_folder_name(folder)
    assert part is None or folder_name(part) == folder
