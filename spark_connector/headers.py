"""``includeHeaders``: the Kafka connector's ``headers`` column, made from message properties.

Kafka's source gives ``headers array<struct<key: string, value: binary>>`` (null when a record
has none) with ``includeHeaders=true``; a Pulsar message's counterpart is its properties, so
the column holds them as (key, UTF-8 value bytes) pairs, in the order the map column holds
them. The ``properties`` column stays as it is. Built from the ``properties`` column of a record
batch with Arrow operations only: no per-row Python work.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["HEADERS_FIELD", "HEADERS_SCHEMA", "with_headers"]

HEADERS_SCHEMA = "headers array<struct<key:string,value:binary>>"
_ENTRY = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_FIELD = pa.field("headers", pa.list_(_ENTRY))


def with_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (with a ``properties`` map column) plus the ``headers`` column."""
    properties = batch.column("properties")
    assert isinstance(properties, pa.MapArray)
    # Map and list arrays share their layout (offsets over one child array): reuse it, with
    # offsets rebased to 0 (a sliced batch's offsets start anywhere in its children).
    offsets = properties.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(first, offsets.type))
    entries = pa.StructArray.from_arrays(
        [
            properties.keys.slice(first, last - first),
            properties.items.slice(first, last - first).cast(pa.binary()),
        ],
        fields=list(_ENTRY),
    )
    headers = pa.ListArray.from_arrays(
        rebased, entries, type=HEADERS_FIELD.type, mask=properties.is_null()
    )
    return pa.RecordBatch.from_arrays(
        [*batch.columns, headers], schema=batch.schema.append(HEADERS_FIELD)
    )
