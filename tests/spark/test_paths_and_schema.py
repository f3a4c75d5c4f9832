"""File-path keys against what Spark really reports, and Delta schemas as Spark types."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
)

from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.spark.paths import spark_file_path, spark_file_paths, spark_read_paths
from airflow_provider_delta.spark.schema import logical_schema, physical_read_schema

AWKWARD_NAMES = [
    "a b", "p%25q", "x=A%2FA", "é ü", "br[ack]et", "q?x", "h#sh", "c{d}", "st*r",
    "plus+amp&eq=", "tab\tx", "nbsp\u00a0x", "semi;colon:at@", "d'q(p)",
]
PLAIN_NAMES = ["day=2024-01-01", "x.y", "...", "a-b_c~d!e*f'g(h)i@k&l=m+n$o,p;q"]


def test_file_path_keys_match_spark_metadata(spark, tmp_path):
    uris = []
    for index, name in enumerate(AWKWARD_NAMES + PLAIN_NAMES):
        folder = tmp_path / name
        folder.mkdir()
        pq.write_table(pa.table({"i": [index]}), folder / f"f{index}.parquet")
        uris.append(f"file://{folder}/f{index}.parquet")
    rows = (
        spark.read.parquet(*spark_read_paths(pa.array(uris)).to_pylist())
        .select("i", "_metadata.file_path")
        .collect()
    )
    assert sorted(r.i for r in rows) == list(range(len(uris)))  # glob characters read literally
    for row in rows:
        assert row.file_path == spark_file_path(uris[row.i])
    # column-wise: plain paths by Arrow's regexes, the others one by one
    assert spark_file_paths(pa.array(uris)).to_pylist() == [
        {r.i: r.file_path for r in rows}[i] for i in range(len(uris))]


def test_object_store_keys():
    assert spark_file_path("s3://bucket/t/a b/x.parquet") == "s3://bucket/t/a%20b/x.parquet"
    assert spark_file_path("file:///t//a/./x.parquet") == "file:/t/a/x.parquet"
    uris = ["s3://bucket/t/a b/x.parquet", "file:///t//a/./x.parquet", "s3://b:9000/t/d=1/x",
            "file://host/t/x", "file:///t/a/../x", "gs://b/t/", "abfss://c@a.dfs/t/x"]
    assert spark_file_paths(pa.chunked_array([uris[:3], uris[3:]])).to_pylist() == [
        spark_file_path(uri) for uri in uris]


def test_paths_of_one_folder_spelled_as_one_by_one():
    """Paths in one folder (a big plan's): the folder is tested once and each name alone; the
    spelling is the same as path by path."""
    names = [f"{name}.parquet" for name in AWKWARD_NAMES + PLAIN_NAMES] + [".", "..", ""]
    for folder in ("file:///t/d/", "file:/t/", "s3://b/t/", "s3://b:9000/", "file:///t/a b/",
                   "file:///t//a/./", "file:///", "gs://b/t/", "abfss://c@a.dfs/t/"):
        for some in (names, ["x.parquet", "y"]):
            uris = [folder + name for name in some]
            assert spark_file_paths(pa.array(uris)).to_pylist() == [
                spark_file_path(uri) for uri in uris], folder



def test_a_deep_folder_that_needs_quoting_is_spelled_at_once():
    """A folder Spark quotes (``%``) under many segments: the test of the folder must fail in
    one pass; a pattern with several ways to match a segment took minutes at eight segments
    (exponential in depth). In a child process, so a regression fails instead of hanging."""
    folder = "file:///" + "/".join(["ab-cd.ef_g"] * 40) + "/bar+%21/"
    code = ("import pyarrow as pa; from airflow_provider_delta.spark.paths import spark_file_paths;"
            f"print(spark_file_paths(pa.array([{folder!r} + 'x.parquet'])).to_pylist()[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == spark_file_path(folder + "x.parquet")
    assert done.stdout.strip().endswith("/bar+%2521/x.parquet")

def _field(name, type_, field_id, physical, nullable=True):
    return {
        "name": name, "type": type_, "nullable": nullable,
        "metadata": {"delta.columnMapping.id": field_id,
                     "delta.columnMapping.physicalName": physical},
    }


SCHEMA = {
    "type": "struct",
    "fields": [
        _field("id", "integer", 1, "col-1", nullable=False),
        _field("when", "timestamp_ntz", 2, "col-2"),
        _field("amount", "decimal(12,5)", 3, "col-3"),
        _field("nested", {"type": "struct", "fields": [_field("inner x", "string", 5, "col-5")]},
               4, "col-4"),
        _field("tags", {"type": "array", "elementType": {
            "type": "struct", "fields": [_field("t", "string", 7, "col-7")]},
            "containsNull": False}, 6, "col-6"),
        _field("attrs", {"type": "map", "keyType": "string", "valueType": "integer",
                         "valueContainsNull": True}, 8, "col-8"),
        _field("part", "string", 9, "col-9"),
    ],
}


def _metadata(mode: str) -> TableMetadata:
    return TableMetadata("id", SCHEMA, ("part",), {"delta.columnMapping.mode": mode})


def test_logical_schema_keeps_names_order_and_types():
    schema = logical_schema(_metadata("name"))
    assert schema.names == ["id", "when", "amount", "nested", "tags", "attrs", "part"]
    assert schema["when"].dataType == TimestampNTZType()
    assert schema["amount"].dataType == DecimalType(12, 5)
    assert schema["tags"].dataType.elementType.names == ["t"]
    assert schema["attrs"].dataType == MapType(StringType(), IntegerType(), True)
    assert all(f.nullable for f in schema.fields)
    assert not any(f.metadata for f in schema.fields)


def test_physical_schema_in_name_mode_renames_nested_fields_and_drops_partitions():
    schema = physical_read_schema(_metadata("name"))
    assert schema.names == ["col-1", "col-2", "col-3", "col-4", "col-6", "col-8"]
    assert schema["col-4"].dataType.names == ["col-5"]
    assert schema["col-6"].dataType == ArrayType(StructType().add("col-7", StringType()), True)


def test_physical_schema_in_id_mode_carries_parquet_field_ids():
    schema = physical_read_schema(_metadata("id"))
    assert [f.metadata["parquet.field.id"] for f in schema.fields] == [1, 2, 3, 4, 6, 8]
    assert schema["col-4"].dataType["col-5"].metadata == {"parquet.field.id": 5}
    assert schema["col-6"].dataType.elementType["col-7"].metadata == {"parquet.field.id": 7}


def test_no_column_mapping_reads_logical_names():
    schema = physical_read_schema(_metadata("none"))
    assert schema.names == ["id", "when", "amount", "nested", "tags", "attrs"]
