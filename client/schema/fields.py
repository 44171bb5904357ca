"""Field types of a ``Record``: what a value may be, its default, and its Avro type.

The official ``pulsar.schema`` field classes, with their meaning: a field declared on a
``Record`` subclass checks every value assigned to it (``validate_type``, which may also
convert: ``bytes`` to ``str`` for ``String``, ``str`` to ``bytes`` for ``Bytes``, a name or a
value to the member for ``CustomEnum``), gives the value of an unset field (``default()``), and
its Avro type in the record's definition (``schema_info``). A field that is not ``required``
may hold None and is declared as the union ``["null", type]``; ``required_default`` writes its
default into the definition. The containers ``Array`` and ``Map`` live in ``record.py``, next
to the ``Record`` they may hold.

Where the official checks are loose this module is a little stricter, never looser: ``Bytes``
refuses values that are neither bytes nor text, and ``CustomEnum`` also accepts a member's
value given as text (which is what ``JsonSchema`` writes for text-valued enums, so those
records now decode).
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "Boolean",
    "Bytes",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "Long",
    "Null",
    "String",
    "type_name",
]

PythonType = type | tuple[type, ...]


def type_name(kind: object) -> str:
    """How error messages name a type, a tuple of types or a field type."""
    return str(getattr(kind, "__name__", kind))


class Field:
    """Base of the field types.

    Args:
        default: the value of the field when a record does not set it (checked like any value).
        required: the field may not hold None; declared without the ``"null"`` union.
        required_default: the default is written into the Avro definition.

    Raises:
        TypeError: ``default`` is not a value of the field's type.
    """

    _avro_type = "null"
    _python_type: PythonType = object

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self._required = required
        self._required_default = required_default
        self._default = None
        if default is not None:
            default = self.validate_type("default", default)
        self._default = default

    def type(self) -> str:
        """The Avro type name."""
        return self._avro_type

    def python_type(self) -> PythonType:
        """What ``isinstance`` checks values against."""
        return self._python_type

    def validate_type(self, name: str, val: Any) -> Any:
        """``val`` as the field stores it; None stands for the default unless ``required``.

        Raises:
            TypeError: ``val`` is not a value of this type.
        """
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.python_type()):
            raise TypeError(
                f"Invalid type '{type(val)}' for field '{name}'. "
                f"Expected: {type_name(self.python_type())}"
            )
        return val

    def schema(self) -> Any:
        """The field's Avro type on its own."""
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        """The field's Avro type inside a record definition; ``defined_names`` holds the named
        types already written out (later uses refer to them by name, as Avro requires)."""
        return self.type()

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default


class Null(Field):
    """Avro ``null``: only None."""

    _avro_type = "null"
    _python_type = type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field {name} is set to be None")
        return val


class Boolean(Field):
    """Avro ``boolean``; unset, it is False (not None)."""

    _avro_type = "boolean"
    _python_type = bool

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    """Avro ``int`` (32 bits on the wire)."""

    _avro_type = "int"
    _python_type = int


class Long(Field):
    """Avro ``long``."""

    _avro_type = "long"
    _python_type = int


class Float(Field):
    """Avro ``float``; ints are accepted as they are (Avro promotes them)."""

    _avro_type = "float"
    _python_type = (float, int)


class Double(Field):
    """Avro ``double``; ints are accepted as they are."""

    _avro_type = "double"
    _python_type = (float, int)


class Bytes(Field):
    """Avro ``bytes``; text is stored UTF-8 encoded."""

    _avro_type = "bytes"
    _python_type = (bytes, str)

    def validate_type(self, name: str, val: Any) -> Any:
        if isinstance(val, str):
            return val.encode()
        if isinstance(val, bytearray | memoryview):
            return bytes(val)
        return super().validate_type(name, val)


class String(Field):
    """Avro ``string``; bytes are stored UTF-8 decoded."""

    _avro_type = "string"
    _python_type = (str, bytes)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, str | bytes):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected a string")
        return val.decode() if isinstance(val, bytes) else val


class CustomEnum(Field):
    """Avro ``enum`` over a Python ``Enum``: its symbols are the member names.

    A record attribute holding an ``Enum`` class declares this field too.

    Raises:
        TypeError: ``enum_type`` is not an ``Enum`` subclass.
    """

    _avro_type = "enum"

    def __init__(
        self,
        enum_type: type[enum.Enum],
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{type_name(enum_type)} is not a valid Enum type")
        self.enum_type = enum_type
        self.values: dict[Any, enum.Enum] = {m.value: m for m in enum_type.__members__.values()}
        super().__init__(default, required, required_default)

    def python_type(self) -> PythonType:
        return self.enum_type

    def validate_type(self, name: str, val: Any) -> Any:
        # None stays None even when required: the official client does the same, and Avro's
        # encoder reports the missing symbol when such a record is sent.
        if val is None:
            return None
        if isinstance(val, self.enum_type):
            return val
        if type(val) is str:
            member = self.enum_type.__members__.get(val, self.values.get(val))
            if member is None:
                raise TypeError(
                    f"Invalid enum value '{val}' for field '{name}'. "
                    f"Expected: {list(self.enum_type.__members__)}"
                )
            return member
        if type(val) is int:
            if val not in self.values:
                raise TypeError(
                    f"Invalid enum value '{val}' for field '{name}'. Expected: {list(self.values)}"
                )
            return self.values[val]
        raise TypeError(
            f"Invalid type '{type(val)}' for field '{name}'. Expected: {type_name(self.enum_type)}"
        )

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [m.name for m in self.enum_type]}
