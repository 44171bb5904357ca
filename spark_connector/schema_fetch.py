"""A topic's schema from the broker (GET_SCHEMA), as the source and the sink need it.

Our blocking client has no schema lookup of its own (``client.schema.AvroSchema`` decodes with
the definition it is given) and the broker's admin API has no ``/admin/v2/schemas`` route, so
this sends GET_SCHEMA itself, on the connection the client keeps to the topic's owner
(``AsyncClient.connection_for``), from the client's loop thread. A version is immutable once
stored, so a version's schema is cached for the life of the process; "latest" is never cached.

Schemas are stored per topic the broker serves, so a partitioned topic's schema is asked of
its ``-partition-N`` topics (``partition_topics``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from client.errors import TopicNotFound
from client.sync import Client
from protocol import commands, pb

__all__ = ["TopicSchema", "fetch_schema"]

# pb.Schema.Type values the connector reads (``schema_columns``).
JSON = 2
AVRO = 4
RECORD_TYPES = (JSON, AVRO)


@dataclass(frozen=True)
class TopicSchema:
    """One stored version of a topic's schema."""

    type: int  # pb.Schema.Type
    data: bytes  # schema_data: the Avro definition for JSON and AVRO
    version: bytes  # 8-byte version, as messages carry it
    declared: bytes  # the serialized pb.Schema: what a producer declares to get this version

    @property
    def is_record(self) -> bool:
        return self.type in RECORD_TYPES


_lock = threading.Lock()
_versions: dict[tuple[int, str, bytes], TopicSchema] = {}


def fetch_schema(client: Client, topic: str, version: bytes | None = None) -> TopicSchema | None:
    """``topic``'s schema at ``version`` (None: the latest), or None when it has none."""
    key = (id(client), topic, version) if version is not None else None
    if key is not None:
        with _lock:
            found = _versions.get(key)
        if found is not None:
            return found
    try:
        answer = client._runner.run(_ask(client, topic, version))
    except TopicNotFound:
        return None  # the broker's answer for "no schema" too
    schema = TopicSchema(
        int(answer.schema.type),
        bytes(answer.schema.schema_data),
        bytes(answer.schema_version),
        answer.schema.SerializeToString(),
    )
    with _lock:
        _versions[(id(client), topic, schema.version)] = schema
    return schema


async def _ask(client: Client, topic: str, version: bytes | None) -> pb.CommandGetSchemaResponse:
    connection = await client._async.connection_for(topic)
    reply = await connection.request(
        lambda request_id: commands.get_schema(topic, request_id, schema_version=version)
    )
    return reply.getSchemaResponse
