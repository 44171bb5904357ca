"""client/__init__: the official package's names, so switching the import is enough."""

from __future__ import annotations


def test_enum_names_of_the_official_package_exist() -> None:
    """An application switching ``import pulsar`` to ``import client`` keeps its enum names."""
    import pulsar

    import client

    for enum_name in ("CompressionType", "InitialPosition", "ProducerAccessMode"):
        official = getattr(pulsar, enum_name)
        ours = getattr(client, enum_name)
        names = [n for n in dir(official) if not n.startswith("_") and n not in ("name", "value")]
        for name in names:
            assert int(getattr(ours, name)) == int(getattr(official, name)), (enum_name, name)
