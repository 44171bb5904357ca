"""client/schema/__init__: every public name of the official ``pulsar.schema``, and the names
``pulsar`` itself gives for schemas, so switching the import is enough."""

from __future__ import annotations

import inspect

import pulsar
import pulsar.schema

import client
import client.schema


def _public(module: object) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_") and inspect.isclass(getattr(module, n))}


def test_every_official_schema_name_exists() -> None:
    missing = _public(pulsar.schema) - set(client.schema.__all__)
    assert not missing
    for name in _public(pulsar.schema):
        assert inspect.isclass(getattr(client.schema, name))


def test_schema_names_of_the_official_top_level_package() -> None:
    assert client.schema.__name__ == "client.schema"  # ``pulsar.schema`` as ``client.schema``
    assert client.BytesSchema is client.schema.BytesSchema
    assert "BytesSchema" in client.__all__


def test_official_parameters() -> None:
    """The constructors take the official parameter names, in the official order."""
    for name in ("Schema", "AvroSchema", "JsonSchema", "ProtobufNativeSchema", "Array", "Map"):
        ours = list(inspect.signature(getattr(client.schema, name)).parameters)
        theirs = list(inspect.signature(getattr(pulsar.schema, name)).parameters)
        assert ours == theirs, name
    for name in ("Integer", "String", "CustomEnum", "Record"):
        ours = list(inspect.signature(getattr(client.schema, name)).parameters)
        theirs = list(inspect.signature(getattr(pulsar.schema, name)).parameters)
        assert ours == [p for p in theirs if p not in ("args",)], name
