"""Avro schema resolution: can data written with one schema be read with another?

Pulsar checks Avro and JSON schemas (a JSON schema's definition is an Avro schema) with Avro's
``SchemaValidator``s, which ask whether resolving the writer's schema against the reader's, as
the Avro specification's "Schema Resolution" section describes, leaves an error. This module is
that question, written from the specification, with Avro Java's choices where the
specification leaves room:

* primitives read as themselves, or promoted: int -> long, float, double; long -> float,
  double; float -> double; string <-> bytes;
* a writer union is readable if each of its branches is; a reader union reads a non-union
  writer through its first branch of the same type (for named types, the one of the same full
  name, else, for records, the first that resolves), else the first it can be promoted to;
* records match field by field, by name or by the reader field's aliases; a writer field the
  reader lacks is skipped; a reader field the writer lacks needs a default (``"default":
  null`` counts). Record names are not compared (Avro Java's resolver does not either, so a
  renamed record class still evolves);
* enums and fixed need the writer's full name to be the reader's (or one of its aliases);
  fixed sizes must be equal; every writer symbol must be a reader symbol unless the reader
  enum has a default;
* arrays and maps resolve their items and values; recursive schemas are followed once.

Logical types are read as their underlying type, as Avro's resolver does. Definitions are
parsed leniently (defaults are not validated, as Pulsar's parser is configured), but an
undefined name or a malformed type is an ``AvroSchemaError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AvroSchemaError",
    "Node",
    "can_be_read_by",
    "parse",
    "resolution_error",
]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})
#: writer type -> reader types it is promoted to (the specification's list).
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class AvroSchemaError(ValueError):
    """The text is not an Avro schema definition."""


@dataclass(eq=False)
class Field:
    name: str
    aliases: frozenset[str]
    type: Node
    has_default: bool


@dataclass(eq=False)
class Node:
    """One parsed schema: ``kind`` is a primitive name, record, enum, fixed, array, map or
    union. Named types are shared objects, so a recursive schema is a cycle of nodes."""

    kind: str
    name: str = ""  # full name of a named type
    aliases: frozenset[str] = frozenset()
    fields: list[Field] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    enum_default: str | None = None
    size: int = 0
    children: list[Node] = field(default_factory=list)  # items, values or union branches

    @property
    def short_name(self) -> str:
        return self.name.rpartition(".")[2]


# ---------------------------------------------------------------------------- parsing


def parse(definition: str | bytes | Any) -> Node:
    """The schema a definition (JSON text, or already decoded JSON) describes."""
    if isinstance(definition, bytes | bytearray):
        definition = bytes(definition).decode("utf-8", errors="strict")
    if isinstance(definition, str):
        try:
            definition = json.loads(definition)
        except ValueError:
            # Avro also accepts a bare primitive name without quotes.
            if definition.strip() in PRIMITIVES:
                return Node(definition.strip())
            raise AvroSchemaError("schema definition is not JSON") from None
    return _Parser().node(definition, "")


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, Node] = {}

    def node(self, value: Any, namespace: str) -> Node:
        if isinstance(value, str):
            return self._reference(value, namespace)
        if isinstance(value, list):
            return Node("union", children=[self.node(branch, namespace) for branch in value])
        if not isinstance(value, dict):
            raise AvroSchemaError(f"not a schema: {value!r}")
        kind = value.get("type")
        if isinstance(kind, dict | list):
            return self.node(kind, namespace)
        if not isinstance(kind, str):
            raise AvroSchemaError(f"schema without a type: {value!r}")
        if kind in PRIMITIVES:
            return Node(kind)
        if kind == "array":
            return Node("array", children=[self.node(_required(value, "items"), namespace)])
        if kind == "map":
            return Node("map", children=[self.node(_required(value, "values"), namespace)])
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(value, "record" if kind == "error" else kind, namespace)
        return self._reference(kind, namespace)

    def _reference(self, name: str, namespace: str) -> Node:
        if name in PRIMITIVES:
            return Node(name)
        for candidate in (_full_name(name, namespace), name):
            if candidate in self.named:
                return self.named[candidate]
        raise AvroSchemaError(f"undefined name: {name!r}")

    def _named(self, value: dict[str, Any], kind: str, enclosing: str) -> Node:
        name = _required(value, "name")
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"bad name: {name!r}")
        namespace = value.get("namespace")
        full = _full_name(name, namespace if isinstance(namespace, str) else enclosing)
        own_namespace = full.rpartition(".")[0]
        if full in self.named:
            raise AvroSchemaError(f"can't redefine: {full}")
        node = Node(kind, name=full, aliases=_aliases(value, own_namespace))
        self.named[full] = node  # before the fields: a record may refer to itself
        if kind == "record":
            node.fields = [self._field(f, own_namespace) for f in _list(value, "fields")]
        elif kind == "enum":
            node.symbols = tuple(str(s) for s in _list(value, "symbols"))
            default = value.get("default")
            node.enum_default = default if isinstance(default, str) else None
        else:
            size = _required(value, "size")
            if isinstance(size, bool) or not isinstance(size, int):
                raise AvroSchemaError(f"fixed {full} has no integer size")
            node.size = size
        return node

    def _field(self, value: Any, namespace: str) -> Field:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise AvroSchemaError(f"bad field: {value!r}")
        aliases = frozenset(str(a) for a in value.get("aliases") or ())
        return Field(
            value["name"],
            aliases,
            self.node(_required(value, "type"), namespace),
            "default" in value,
        )


def _required(value: dict[str, Any], key: str) -> Any:
    if key not in value:
        raise AvroSchemaError(f"{value.get('type')} schema without {key!r}")
    return value[key]


def _list(value: dict[str, Any], key: str) -> list[Any]:
    items = _required(value, key)
    if not isinstance(items, list):
        raise AvroSchemaError(f"{key!r} must be a list")
    return items


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _aliases(value: dict[str, Any], namespace: str) -> frozenset[str]:
    return frozenset(_full_name(str(a), namespace) for a in value.get("aliases") or ())


# ---------------------------------------------------------------------------- resolution


def resolution_error(writer: Node, reader: Node) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader``; None if it can."""
    return _resolve(writer, reader, set(), "")


def can_be_read_by(writer: Node, readers: Iterable[Node]) -> str | None:
    """The first reader of ``readers`` that cannot read ``writer``'s data, as a reason."""
    for reader in readers:
        error = resolution_error(writer, reader)
        if error is not None:
            return error
    return None


def _resolve(writer: Node, reader: Node, seen: set[tuple[int, int]], at: str) -> str | None:
    pair = (id(writer), id(reader))
    if pair in seen:
        return None  # a recursive type already being resolved: its answer is the outer one
    seen.add(pair)
    if writer.kind == "union":
        for branch in writer.children:
            error = _resolve(branch, reader, seen, at)
            if error is not None:
                return error
        return None
    if writer.kind == reader.kind:
        return _resolve_same_kind(writer, reader, seen, at)
    if reader.kind == "union":
        chosen = _reader_branch(writer, reader.children, seen)
        if chosen is None:
            return f"{_where(at)}{_describe(writer)} matches no branch of the reader's union"
        return _resolve(writer, chosen, seen, at)
    if reader.kind in PROMOTIONS.get(writer.kind, ()):
        return None
    return f"{_where(at)}{_describe(writer)} cannot be read as {_describe(reader)}"


def _resolve_same_kind(
    writer: Node, reader: Node, seen: set[tuple[int, int]], at: str
) -> str | None:
    kind = writer.kind
    if kind in PRIMITIVES:
        return None
    if kind in ("array", "map"):
        return _resolve(writer.children[0], reader.children[0], seen, f"{at}[]")
    if kind == "record":
        return _resolve_record(writer, reader, seen, at)
    if not _same_name(writer, reader):
        return f"{_where(at)}{kind} {writer.name} cannot be read as {kind} {reader.name}"
    if kind == "fixed":
        if writer.size != reader.size:
            return f"{_where(at)}fixed {writer.name} has size {writer.size}, not {reader.size}"
        return None
    if kind == "enum" and reader.enum_default is None:
        missing = [s for s in writer.symbols if s not in reader.symbols]
        if missing:
            return f"{_where(at)}enum {writer.name}: the reader lacks symbols {missing}"
    return None  # unions are handled before: a writer union is resolved branch by branch


def _resolve_record(writer: Node, reader: Node, seen: set[tuple[int, int]], at: str) -> str | None:
    written = {f.name: f for f in writer.fields}
    for reader_field in reader.fields:
        writer_field = written.get(reader_field.name)
        if writer_field is None:
            writer_field = next((written[a] for a in reader_field.aliases if a in written), None)
        path = f"{at}.{reader_field.name}" if at else reader_field.name
        if writer_field is None:
            if not reader_field.has_default:
                return f"field {path!r} is missing from the writer and has no default"
            continue
        error = _resolve(writer_field.type, reader_field.type, seen, path)
        if error is not None:
            return error
    return None


def _reader_branch(
    writer: Node, branches: Sequence[Node], seen: set[tuple[int, int]]
) -> Node | None:
    """The branch of a reader union that reads a non-union ``writer`` (Avro Java's order)."""
    structural: Node | None = None
    for branch in branches:
        if branch.kind != writer.kind:
            continue
        if writer.kind not in NAMED:
            return branch
        if _same_name(writer, branch):
            return branch
        if (
            writer.kind == "record"
            and (structural is None or writer.short_name == branch.short_name)
            and _resolve(writer, branch, set(seen), "") is None
        ):
            structural = branch
    if structural is not None:
        return structural
    promoted = PROMOTIONS.get(writer.kind, frozenset())
    return next((b for b in branches if b.kind in promoted), None)


def _same_name(writer: Node, reader: Node) -> bool:
    return writer.name == reader.name or writer.name in reader.aliases


def _describe(node: Node) -> str:
    return f"{node.kind} {node.name}" if node.name else node.kind


def _where(at: str) -> str:
    return f"field {at!r}: " if at else ""
