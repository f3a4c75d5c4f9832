"""Type widening (``typeWidening``/``typeWidening-preview``, issue 12.12): files written before a
widening are read with the widened type, as Delta does. deltalake's DataFusion refuses the
feature, so the oracle past the widening is pyarrow: each Parquet file read as written and cast
to the widened Arrow types.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from airflow_provider_delta.core import plan_changes
from airflow_provider_delta.spark import read_changes, read_snapshot
from tests.core.conftest import commit_actions, data_change_adds
from tests.conftest import widened_schema
from tests.spark.conftest import oracle_rows, spark_rows, table_rows, write_commit


def _arrow_file(path: str) -> pa.Table:
    return pq.read_table(path.removeprefix("file://"))


def test_shared_type_widening_table(spark, shared_table, assert_same_rows):
    """Delta Spark widened 13 columns at v2 (byte/short/int/long to long, double and decimal,
    float to double, decimal precision and scale, date to timestamp_ntz) and appended a row."""
    path = shared_table("delta-golden/type-widening")
    [narrow_file], [wide_file] = data_change_adds(path, 0), data_change_adds(path, 2)
    narrow, wide = _arrow_file(narrow_file), _arrow_file(wide_file)
    both = table_rows(narrow.cast(wide.schema)) + table_rows(wide)
    assert_same_rows(spark_rows(read_snapshot(spark, path, version=0)), oracle_rows(path, 0))
    assert_same_rows(spark_rows(read_snapshot(spark, path, version=1)), table_rows(narrow))
    widened = read_snapshot(spark, path, version=2)
    assert [f.dataType.simpleString() for f in widened.schema][:3] == ["bigint", "bigint",
                                                                         "double"]
    assert_same_rows(spark_rows(widened), both)
    assert_same_rows(spark_rows(read_changes(spark, path, 0, 2)), both)
    assert_same_rows(spark_rows(read_changes(spark, path, 1)), table_rows(wide))


_NARROW = pa.schema([
    ("id", pa.int32()),
    ("s", pa.struct([("a", pa.int16()), ("d", pa.date32())])),
    ("arr", pa.list_(pa.int16())),
    ("m", pa.map_(pa.int32(), pa.float32())),
    ("price", pa.decimal128(5, 2)),
    ("day", pa.date32()),
])
_WIDE = pa.schema([
    ("id", pa.int64()),
    ("s", pa.struct([("a", pa.int32()), ("d", pa.timestamp("us"))])),
    ("arr", pa.list_(pa.float64())),
    ("m", pa.map_(pa.int64(), pa.float64())),
    ("price", pa.decimal128(10, 4)),
    ("day", pa.timestamp("us")),
])
# (field path, widened Delta type) as Delta records them in delta.typeChanges
_WIDENINGS = [(["id"], "long"), (["s", "a"], "integer"), (["s", "d"], "timestamp_ntz"),
              (["arr", "element"], "double"), (["m", "key"], "long"), (["m", "value"], "double"),
              (["price"], "decimal(10,4)"), (["day"], "timestamp_ntz")]


def _narrow_rows(first_id: int) -> pa.Table:
    return pa.table({
        "id": [first_id, first_id + 1],
        "s": [{"a": 7, "d": dt.date(2024, 2, 29)}, None],
        "arr": [[1, -2], []],
        "m": [[(3, 0.1)], None],
        "price": [Decimal("123.45"), None],
        "day": [dt.date(2024, 1, 1 + first_id % 2), None],
    }, _NARROW)


def _append_wide(path: str, version: int, rows: pa.Table) -> None:
    """What a Delta writer appends after the widening: files in the wide types."""
    day = rows["day"][0].as_py().isoformat(sep=" ")
    relative = f"wide-{version}.parquet"
    pq.write_table(rows.drop_columns(["day"]), Path(path, relative))
    write_commit(path, version, [{"add": {
        "path": relative, "partitionValues": {"day": day},
        "size": Path(path, relative).stat().st_size, "modificationTime": 0, "dataChange": True}}])


def widened_table(path: str) -> pa.Table:
    """v0, v1: deltalake appends in the narrow types; v2: widening commit (nested fields,
    array element, map key and value, decimal, and the date partition column); v3: an append
    in the wide types. Returns the v3 rows."""
    write_deltalake(path, _narrow_rows(0), partition_by=["day"])
    write_deltalake(path, _narrow_rows(10), partition_by=["day"], mode="append")
    meta = next(a["metaData"] for a in commit_actions(path, 0) if "metaData" in a)
    schema = widened_schema(json.loads(meta["schemaString"]), _WIDENINGS, table_version=2)
    features = ["typeWidening", "timestampNtz"]
    write_commit(path, 2, [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features,
                      "writerFeatures": features}},
        {"metaData": dict(meta, schemaString=json.dumps(schema))}])
    appended = pa.table({
        "id": [2**40], "s": [{"a": 2**20, "d": dt.datetime(2024, 3, 1, 12, 30)}],
        "arr": [[0.5]], "m": [[(2**40, 1e300)]], "price": [Decimal("123456.7891")],
        "day": [dt.datetime(2024, 3, 1, 6, 15)],
    }, _WIDE)
    _append_wide(path, 3, appended)
    return appended


def test_widened_nested_fields_and_partition_column(spark, tmp_path, assert_same_rows):
    path = str(tmp_path / "t")
    appended = widened_table(path)
    narrow = pa.concat_tables([_narrow_rows(0), _narrow_rows(10)])
    assert_same_rows(spark_rows(read_snapshot(spark, path, version=1)), oracle_rows(path, 1))
    expected = table_rows(narrow.cast(_WIDE)) + table_rows(appended)
    snapshot = read_snapshot(spark, path)
    assert snapshot.schema["m"].dataType.simpleString() == "map<bigint,double>"
    assert_same_rows(spark_rows(snapshot), expected)
    assert_same_rows(spark_rows(read_changes(spark, path, 0, 3)), expected)
    assert_same_rows(spark_rows(read_changes(spark, path, 1, 3)),
                     table_rows(_narrow_rows(10).cast(_WIDE)) + table_rows(appended))
    assert plan_changes(path, 1, 3).metadata_changes.keys() == {1, 2}
