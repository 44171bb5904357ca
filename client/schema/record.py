"""``Record``: a class whose attributes declare fields, and the containers ``Array`` and ``Map``.

As the official ``pulsar.schema.Record``: each subclass collects its field declarations (class
attributes that are ``Field`` instances, ``Record`` instances or classes, or ``Enum`` classes)
when the class is created; instances take the field values as keyword arguments, check every
assignment, and ``schema()`` gives the Avro record definition that ``JsonSchema`` and
``AvroSchema`` declare to brokers. That definition is computed exactly as the official one,
key order included, because a registry tells schemas apart by their JSON text: the same
``Record`` must register the same schema from both clients. Fields are those a class declares
itself (the official client does not inherit fields either, and the definitions must agree).

A ``Record`` instance is also a field declaration (``sub = Address(required=True)``), which is
why ``__init__`` takes ``default``, ``required_default`` and ``required`` first, and why the
field helpers (``validate_type``, ``default``, ...) are methods of records too.

``Array`` and ``Map`` live here because they may hold records and records may hold them.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, cast

from client.schema.fields import CustomEnum, Field, PythonType, type_name

__all__ = ["Array", "Map", "Record", "RecordMeta"]

_FLAGS = ("_required_default", "_default", "_required")
"""Per-instance settings of a record used as a field; ``JsonSchema`` drops them from values."""

_MISSING = object()


class RecordMeta(type):
    """Collects a ``Record`` subclass's fields (in declaration order) into ``_fields``."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> RecordMeta:
        if any(isinstance(base, RecordMeta) for base in bases):  # not Record itself
            namespace["_fields"] = _declared_fields(namespace)
            namespace["_required"] = False
        return super().__new__(mcs, name, bases, namespace)


def _declared_fields(namespace: dict[str, Any]) -> dict[str, Field | Record]:
    fields: dict[str, Field | Record] = {}
    for name, value in namespace.items():
        if isinstance(value, enum.EnumMeta):
            value = CustomEnum(cast(type[enum.Enum], value))
        elif isinstance(value, RecordMeta):
            value = value()  # a record class stands for a default instance of it
        if isinstance(value, Field | Record):
            fields[name] = value
    return fields


class Record(metaclass=RecordMeta):
    """Base of record types: subclass it and declare fields as class attributes.

    Args:
        default, required_default, required: only for a record used as a field of another
            record (see ``Field``).
        **kwargs: field values by name; nested records (also inside an ``Array`` or a ``Map``)
            may be given as dicts of their fields. Names that are not fields are ignored, so a
            decoder may pass a newer writer's extra fields.

    Raises:
        TypeError: a value is not of its field's type.
    """

    _avro_namespace: ClassVar[str | None] = None
    """The Avro ``namespace`` of the record definition."""
    _sorted_fields: ClassVar[bool] = False
    """Declare the fields sorted by name instead of in declaration order."""
    _fields: ClassVar[dict[str, Field | Record]] = {}
    _required: bool

    def __init__(
        self,
        default: Any = None,
        required_default: bool = False,
        required: bool = False,
        **kwargs: Any,
    ) -> None:
        # The flags first: ``__str__`` shows ``__dict__`` in this order, as the official.
        self._required_default = required_default
        self._default = default
        self._required = required
        for name, field in self._fields.items():
            if name in kwargs:
                setattr(self, name, _from_plain(field, kwargs[name]))
            elif isinstance(field, Record):
                # An unset sub-record is the declaration's instance (the official behaviour).
                setattr(self, name, field)
            else:
                object.__setattr__(self, name, field.default())

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro record definition (a JSON-ready dict)."""
        definition: dict[str, Any] = cls.schema_info(set())
        return definition

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        """The definition inside another; a record already written out is named, not repeated."""
        full_name = cls.__name__
        if cls._avro_namespace is not None:
            full_name = f"{cls._avro_namespace}.{cls.__name__}"
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        definition: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            definition["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields = []
        for name in names:
            field = cls._fields[name]
            field_type = field.schema_info(defined_names)
            if not field._required:
                field_type = ["null", field_type]
            if field.required_default():
                fields.append(
                    {"name": name, "default": _avro_default(field.default()), "type": field_type}
                )
            else:
                fields.append({"name": name, "type": field_type})
        definition["fields"] = fields
        return definition

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in _FLAGS:
            field = self._fields.get(key)
            if field is None:
                raise AttributeError(f"Cannot set undeclared field {key} on record")
            value = field.validate_type(key, value)
        object.__setattr__(self, key, value)

    def __eq__(self, other: object) -> bool:
        return all(getattr(self, name) == getattr(other, name, _MISSING) for name in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __str__(self) -> str:
        return str(self.__dict__)

    # ----------------------------------------------------------- as a field of another record

    def type(self) -> str:
        return self.__class__.__name__

    def python_type(self) -> PythonType:
        return self.__class__

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.__class__):
            raise TypeError(
                f"Invalid type '{type(val)}' for sub-record field '{name}'. "
                f"Expected: {type_name(self.__class__)}"
            )
        return val

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default


def _avro_default(value: Any) -> Any:
    """A default as the definition writes it: an enum by its symbol."""
    return value.name if isinstance(value, enum.Enum) else value


def _from_plain(field: Field | Record, value: Any) -> Any:
    """``value`` with nested records given as dicts built into records (decoders give dicts)."""
    if isinstance(field, Record) and isinstance(value, dict):
        return type(field)(**value)
    if (
        isinstance(field, Array)
        and isinstance(field.array_type, Record)
        and isinstance(value, list)
        and value
        and isinstance(value[0], dict)
    ):
        item_type = type(field.array_type)
        return [item_type(**item) for item in value]
    if (
        isinstance(field, Map)
        and isinstance(field.value_type, Record)
        and isinstance(value, dict)
        and value
        and isinstance(next(iter(value.values())), dict)
    ):
        value_type = type(field.value_type)
        return {key: value_type(**item) for key, item in value.items()}
    return value


def _item_type(kind: Any) -> Field | Record:
    """A container's item declaration: a field or record instance; a record class is
    instantiated (so its values can be checked).

    Raises:
        TypeError: anything else.
    """
    if isinstance(kind, RecordMeta):
        return kind()  # type: ignore[no-any-return]
    if isinstance(kind, Field | Record):
        return kind
    raise TypeError(f"Argument {type_name(kind)} is not a Record or a Field")


class Array(Field):
    """Avro ``array`` of one item type (a field or a record).

    Raises:
        TypeError: ``array_type`` is neither a field nor a record.
    """

    _avro_type = "array"
    _python_type = list

    def __init__(
        self,
        array_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.array_type = _item_type(array_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        item_type = self.array_type.python_type()
        for item in val:
            if not isinstance(item, item_type):
                raise TypeError(
                    f"Array field {name} items should all be of type "
                    f"{type_name(self.array_type.type())}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        # The official writes ``type()`` for fields that are not containers or records, which
        # is the same text except for enums, where it is not valid Avro: ours names the enum.
        return {"type": "array", "items": self.array_type.schema_info(defined_names)}


class Map(Field):
    """Avro ``map``: text keys, values of one type (a field or a record).

    Raises:
        TypeError: ``value_type`` is neither a field nor a record.
    """

    _avro_type = "map"
    _python_type = dict

    def __init__(
        self,
        value_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.value_type = _item_type(value_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        value_type = self.value_type.python_type()
        for key, value in val.items():
            if not isinstance(key, str):
                raise TypeError(f"Map keys for field {name} should all be strings")
            if not isinstance(value, value_type):
                raise TypeError(
                    f"Map values for field {name} should all be of type {type_name(value_type)}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": self.value_type.schema_info(defined_names)}


def plain_fields(record: object) -> dict[str, Any]:
    """A record's field values, without the flags of a record used as a field (works for the
    official ``Record`` too: it keeps the same attributes)."""
    fields = dict(vars(record))
    for key in _FLAGS:
        fields.pop(key, None)
    return fields
