"""Tables written in the tests with ``deltalake``, for what the shared set lacks."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import plan_changes
from airflow_provider_delta.errors import MissingDataFileError
from airflow_provider_delta.spark import read_changes, read_snapshot
from airflow_provider_delta.spark.paths import spark_file_paths, spark_read_paths
from tests.spark.conftest import oracle_rows, spark_rows, table_rows


def test_vacuumed_file_raises_before_any_row(spark, tmp_path):
    path = str(tmp_path / "t")
    for batch in range(3):
        write_deltalake(path, pa.table({"id": [batch * 10 + i for i in range(10)]}), mode="append")
    gone = plan_changes(path, 1, 1).files[0].path
    os.remove(gone.removeprefix("file://"))
    with pytest.raises(MissingDataFileError) as error:
        read_changes(spark, path, 0, 2)
    assert error.value.version == 1
    assert error.value.path == gone
    assert path in str(error.value) and "version 1" in str(error.value)
    assert spark_rows(read_changes(spark, path, 2, 2)) == table_rows(
        pa.table({"id": list(range(20, 30))}))


def test_a_table_in_a_folder_named_like_a_url(spark, url_characters_table, assert_same_rows):
    """Spark reads the table's own files: Hadoop's Path(String) keeps "#" and "?" in the path,
    and the plan's paths as Spark spells them match the files it scanned."""
    path, copy = url_characters_table
    assert_same_rows(spark_rows(read_snapshot(spark, path)), oracle_rows(copy))
    assert_same_rows(spark_rows(read_changes(spark, f"file://{path}", 1, 2)),
                     oracle_rows(copy) - oracle_rows(copy, 0))
    planned = pa.array([f.path for f in plan_changes(path, 0, 2).files])
    scanned = spark.read.parquet(*spark_read_paths(planned).to_pylist())
    assert sorted(spark_file_paths(planned).to_pylist()) == sorted(
        row.file_path for row in scanned.select("_metadata.file_path").distinct().collect())


def test_schema_change_in_the_middle_of_a_range(spark, tmp_path, assert_same_rows):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2], "name": ["a", "b"]}), mode="append")
    write_deltalake(path, pa.table({"id": [3], "name": ["c"]}), mode="append")
    write_deltalake(
        path, pa.table({"id": [4], "name": ["d"], "score": [1.5]}),
        mode="append", schema_mode="merge",
    )
    df = read_changes(spark, path, 1, 2)
    assert df.columns == ["id", "name", "score"]
    assert_same_rows(spark_rows(df), table_rows(pa.table(
        {"id": [3, 4], "name": ["c", "d"], "score": [None, 1.5]})))
    assert_same_rows(spark_rows(read_snapshot(spark, path)), oracle_rows(path))


def test_wide_partitioning_with_every_type_and_nulls(spark, tmp_path, assert_same_rows):
    path = str(tmp_path / "t")
    n = 40
    utc = dt.timezone.utc
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "p_str": pa.array([None if i % 7 == 0 else f"v {i % 5}/%+é" for i in range(n)]),
        "p_int": pa.array([i % 3 for i in range(n)], pa.int32()),
        "p_byte": pa.array([i % 2 - 1 for i in range(n)], pa.int8()),
        "p_bool": pa.array([None if i % 11 == 0 else i % 2 == 0 for i in range(n)]),
        "p_date": pa.array([dt.date(2024, 1, 1 + i % 4) for i in range(n)]),
        "p_ts": pa.array([dt.datetime(2024, 5, 1, 12, i % 3, 7, 123456, tzinfo=utc)
                          for i in range(n)], pa.timestamp("us", tz="UTC")),
        "p_dec": pa.array([Decimal(f"{i % 4}.25") for i in range(n)], pa.decimal128(6, 2)),
        "p_double": pa.array([i % 2 + 0.5 for i in range(n)]),
    })
    partitions = [c for c in table.column_names if c.startswith("p_")]
    write_deltalake(path, table.slice(0, 20), partition_by=partitions)
    write_deltalake(path, table.slice(20), partition_by=partitions, mode="append")
    assert len(DeltaTable(path).file_uris()) > 30
    for version in (0, 1):
        got = read_snapshot(spark, path, version=version)
        assert got.columns == table.column_names
        assert_same_rows(spark_rows(got), oracle_rows(path, version))
    assert_same_rows(spark_rows(read_changes(spark, path, 1, 1)), table_rows(table.slice(20)))


@pytest.mark.slow
def test_five_thousand_small_files(spark, tmp_path, assert_same_rows):
    path = str(tmp_path / "t")
    files = 5000
    table = pa.table({"id": pa.array(range(files), pa.int64()),
                      "bucket": pa.array(range(files), pa.int32())})
    write_deltalake(path, table.slice(0, 10), partition_by=["bucket"])
    write_deltalake(path, table.slice(10), partition_by=["bucket"], mode="append")
    df = read_changes(spark, path, 0, 1)
    assert_same_rows(spark_rows(df), table_rows(table))


def test_partition_values_looked_up_by_file_stay_nullable(spark, tmp_path):
    """Small plans get partition values from SQL literals; a column of non-null literals would
    be NOT NULL, and a sink would then refuse a later batch's nulls."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1], "part": ["a"]}), partition_by=["part"])
    df = read_changes(spark, path, 0, 0)
    assert [(f.name, f.nullable) for f in df.schema.fields] == [("id", True), ("part", True)]
    assert spark_rows(df) == table_rows(pa.table({"id": [1], "part": ["a"]}))
