"""includeHeaders: Kafka's headers column from the properties map (pure Arrow)."""

from __future__ import annotations

import pyarrow as pa

from spark_connector.headers import HEADERS_FIELD, with_headers


def test_headers_from_properties_sliced_or_not() -> None:
    properties = pa.array(
        [[("a", "1"), ("b", "é")], None, [("c", "x")], []],
        pa.map_(pa.string(), pa.string()),
    )
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2, 3, 4]), properties], ["n", "properties"])
    out = with_headers(batch)
    assert out.schema.field("headers") == HEADERS_FIELD
    assert out.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": "é".encode()}],
        None,
        [{"key": "c", "value": b"x"}],
        [],
    ]
    assert with_headers(batch.slice(2, 2)).column("headers").to_pylist() == [
        [{"key": "c", "value": b"x"}],
        [],
    ]
