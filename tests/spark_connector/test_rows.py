"""``rows.Columns``: Arrow chunks as Python lists, with each row's estimated entry size (pure,
no JVM)."""

from __future__ import annotations

import pyarrow as pa

from spark_connector.batches import BatchCutter
from spark_connector.rows import RECORD_OVERHEAD, Columns

MAP = pa.map_(pa.string(), pa.string())


def chunk(values: list[bytes | None], keys: list[str | None] | None = None) -> Columns:
    arrays = [pa.array(values, pa.binary())]
    plan = {"value": 0}
    if keys is not None:
        arrays.append(pa.array(keys, pa.string()))
        plan["key"] = 1
    names = ["value", "key"][: len(arrays)]
    return Columns(pa.RecordBatch.from_arrays(arrays, names=names), plan)


def test_rows_of_one_size_are_uniform() -> None:
    """Equal estimated sizes (value plus key plus overhead) give ``uniform`` and the same
    ``sizes`` as row by row."""
    columns = chunk([b"ab", b"cd", b"e"], ["x", "y", "zz"])
    assert columns.uniform == 3 + RECORD_OVERHEAD
    assert columns.sizes == [3 + RECORD_OVERHEAD] * 3
    assert columns.values == [b"ab", b"cd", b"e"]


def test_rows_of_several_sizes_are_not_uniform() -> None:
    columns = chunk([b"ab", None, b"abc"])
    assert columns.uniform is None
    assert columns.sizes == [2 + RECORD_OVERHEAD, RECORD_OVERHEAD, 3 + RECORD_OVERHEAD]


def test_properties_count_in_the_size_and_are_never_uniform() -> None:
    """Properties are sized in Python, row by row: such a chunk never claims ``uniform``."""
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"a", b"b"], pa.binary()), pa.array([[("k", "v")], None], MAP)],
        names=["value", "properties"],
    )
    columns = Columns(batch, {"value": 0, "properties": 1})
    assert columns.uniform is None
    assert columns.sizes == [1 + RECORD_OVERHEAD + 1 + 1 + 4, 1 + RECORD_OVERHEAD]


def test_an_empty_chunk() -> None:
    columns = chunk([])
    assert (columns.count, columns.sizes, columns.uniform) == (0, [], None)


def test_uniform_sizes_cut_as_the_listed_sizes() -> None:
    """What the sink does with ``uniform`` (``sink_send``): the same batch ends."""
    columns = chunk([b"v" * 100] * 2500)
    assert columns.uniform is not None
    by_list = BatchCutter(1000, 128 * 1024).split(columns.sizes)
    assert BatchCutter(1000, 128 * 1024).split(columns.sizes, columns.uniform) == by_list
