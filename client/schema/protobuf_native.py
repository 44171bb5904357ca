"""``ProtobufNativeSchema``: generated protobuf messages in their own binary encoding.

As the official: type ``ProtobufNative``, name ``"PROTOBUF_NATIVE"``, and a definition the
Java broker reads as ``ProtobufNativeSchemaData``: ``fileDescriptorSet`` (the base64 of a
``FileDescriptorSet`` holding the message's file and every file it imports, imports first),
``rootMessageTypeName`` and ``rootFileDescriptorName``, in that key order.
"""

from __future__ import annotations

import base64
from typing import Any, TypeVar

from google.protobuf import descriptor, descriptor_pb2
from google.protobuf.message import Message as ProtobufMessage

from client.schema.base import Schema, SchemaType

__all__ = ["ProtobufNativeSchema"]

M = TypeVar("M", bound=ProtobufMessage)


class ProtobufNativeSchema(Schema[M]):
    """Protobuf messages of one generated class.

    Raises:
        TypeError: ``record_cls`` is not a protobuf ``Message`` subclass.
    """

    def __init__(self, record_cls: type[M]) -> None:
        if not (isinstance(record_cls, type) and issubclass(record_cls, ProtobufMessage)):
            raise TypeError(f"record_cls must be a protobuf Message subclass, got {record_cls!r}")
        super().__init__(
            record_cls,
            SchemaType.PROTOBUF_NATIVE,
            _definition(record_cls.DESCRIPTOR),
            "PROTOBUF_NATIVE",
        )

    def encode(self, obj: M) -> bytes:
        self._validate_object_type(obj)
        return obj.SerializeToString()

    def decode(self, data: bytes) -> M:
        message: M = self._record_cls.FromString(data)
        return message

    def __str__(self) -> str:
        return f"ProtobufNativeSchema({self._record_cls.__name__})"


def _definition(root: Any) -> dict[str, Any]:
    """``root``: a message ``Descriptor`` (pure Python or upb, the same accessors)."""
    files = descriptor_pb2.FileDescriptorSet()
    _add_file(root.file, set(), files)
    return {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode("ascii"),
        "rootMessageTypeName": root.full_name,
        "rootFileDescriptorName": root.file.name,
    }


def _add_file(
    file: descriptor.FileDescriptor, seen: set[str], files: descriptor_pb2.FileDescriptorSet
) -> None:
    """``file`` after the files it imports (depth first), each once."""
    if file.name in seen:
        return
    for dependency in file.dependencies:
        _add_file(dependency, seen, files)
    seen.add(file.name)
    file.CopyToProto(files.file.add())
