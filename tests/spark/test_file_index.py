"""A plan's files reach Spark as a file index (spark/file_index.py): every file read once, with
its own partition values and deletion vector, whatever its folder or name spelling. Each test
runs both routes: ``PlanFileIndex`` compiled in the JVM, and the ``_spark_metadata`` log a JVM
that cannot compile it gets."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType, BooleanType, ByteType, DateType, DecimalType, DoubleType, FloatType,
    IntegerType, LongType, ShortType, StringType, StructField, StructType, TimestampNTZType,
    TimestampType,
)

from airflow_provider_delta.errors import UnsupportedFeatureError
from airflow_provider_delta.spark import file_index, read_changes, read_snapshot
from airflow_provider_delta.spark.file_index import hidden_files
from airflow_provider_delta.spark.handoff import LOOKUP_MAX_FILES
from airflow_provider_delta.spark.paths import spark_file_paths
from tests.spark.conftest import inline_deletion_vector, spark_rows, write_commit

# more files than the per-file lookup takes, so partition values and vectors go through joins
FILES = LOOKUP_MAX_FILES + 16
ROWS = 5
# folder names Spark spells differently from the log (quoted, non-ASCII) or could parse
PARTS = ["a b", "100%", "é/ü", "x=1", "plain"]
FEATURES = ["deletionVectors"]
DELETED = [1, 3]


def _add(table: Path, number: int, part: str, name: str | None = None) -> dict:
    """A data file of ROWS distinct ids in ``part``'s folder, and its add action."""
    relative = f"part={part}/{name or f'f{number:03d}.parquet'}"
    file = table / relative
    file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(number * 100, number * 100 + ROWS),
                                            pa.int64())}), file)
    return {"path": quote(relative), "partitionValues": {"part": part},
            "size": file.stat().st_size, "modificationTime": 0, "dataChange": True}


def _table(table: Path) -> list[dict]:
    """v0: protocol and metadata; v1: FILES files spread over PARTS; v2: the first file's rows
    DELETED by an inline vector (the file removed and added again with it)."""
    (table / "_delta_log").mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}}]}
    write_commit(table, 0, [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": FEATURES, "writerFeatures": FEATURES}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": ["part"],
                      "configuration": {"delta.enableDeletionVectors": "true"},
                      "createdTime": 0}}])
    adds = [_add(table, n, PARTS[n % len(PARTS)]) for n in range(FILES)]
    write_commit(table, 1, [{"add": add} for add in adds])
    vector = inline_deletion_vector(DELETED)
    descriptor = {"storageType": "i", "pathOrInlineDv": vector.path_or_inline_dv,
                  "sizeInBytes": vector.size_in_bytes, "cardinality": vector.cardinality}
    write_commit(table, 2, [
        {"remove": {"path": adds[0]["path"], "dataChange": True, "deletionTimestamp": 1}},
        {"add": dict(adds[0], deletionVector=descriptor)}])
    return adds


@pytest.fixture(params=["index", "log"])
def route(request, spark, monkeypatch) -> str:
    if request.param == "log":  # as where Janino cannot compile PlanFileIndex
        monkeypatch.setitem(file_index._INDEX_CLASSES, spark.sparkContext._gateway, None)
    return request.param


def _relations(df) -> list[str]:
    plan = df._jdf.queryExecution().optimizedPlan().toString()
    return re.findall(r"Relation \[[^]]*\] (\S+)", plan)


def _rows(numbers: range, deleted: dict[int, list[int]] | None = None) -> Counter:
    """(id, part) of the files ``numbers``, without the row positions ``deleted`` by file."""
    return Counter((n * 100 + row, PARTS[n % len(PARTS)]) for n in numbers
                   for row in range(ROWS) if row not in (deleted or {}).get(n, []))


def test_every_file_once_with_its_partition_and_vector(spark, tmp_path, route):
    _table(tmp_path / "t")
    path = str(tmp_path / "t")
    assert spark_rows(read_snapshot(spark, path, version=1)) == _rows(range(FILES))
    assert spark_rows(read_snapshot(spark, path)) == _rows(range(FILES), {0: DELETED})
    # the first file twice in one range: once whole (v1), once with its vector (v2)
    assert spark_rows(read_changes(spark, path, 1, 2, ignore_changes=True)) == (
        _rows(range(FILES)) + _rows(range(1), {0: DELETED}))


def test_a_file_without_size_in_the_log_is_read(spark, tmp_path, route):
    table = tmp_path / "t"
    _table(table)
    add = _add(table, FILES, "plain")
    del add["size"]  # optional in a remove; a reader must not take it for an empty file
    write_commit(table, 3, [{"add": add}])
    assert spark_rows(read_changes(spark, str(table), 3, 3)) == Counter(
        (FILES * 100 + row, "plain") for row in range(ROWS))


@pytest.mark.parametrize("name", ["_hidden.parquet", ".hidden.parquet"])
def test_a_file_spark_would_skip_by_its_name_is_refused(spark, tmp_path, name, route):
    table = tmp_path / "t"
    _table(table)
    write_commit(table, 3, [{"add": _add(table, FILES, "plain", name)}])
    with pytest.raises(UnsupportedFeatureError) as error:
        read_changes(spark, str(table), 3, 3)
    assert error.value.version == 3 and name in str(error.value)


def test_the_plan_is_one_scan_over_the_compiled_index(spark, tmp_path):
    """No JSON for Spark to parse: the files reach one scan as PlanFileIndex's statuses."""
    _table(tmp_path / "t")
    snapshot = read_snapshot(spark, str(tmp_path / "t"))
    assert _relations(snapshot) == ["parquet"]
    scan = spark._jvm.PythonSQLUtils.explainString(snapshot._jdf.queryExecution(), "formatted")
    assert "Location: PlanFileIndex [" in scan
    assert spark_rows(snapshot) == _rows(range(FILES), {0: DELETED})


def test_an_empty_file_is_skipped(spark, tmp_path, route):
    """As Spark skips an empty file among explicit paths (a zero-byte file is no Parquet)."""
    table = tmp_path / "t"
    _table(table)
    (table / "empty.parquet").write_bytes(b"")
    write_commit(table, 3, [{"add": {"path": "empty.parquet", "partitionValues": {"part": "x"},
                                     "size": 0, "modificationTime": 0, "dataChange": True}},
                            {"add": _add(table, FILES, "plain")}])
    assert spark_rows(read_changes(spark, str(table), 3, 3)) == Counter(
        (FILES * 100 + row, "plain") for row in range(ROWS))


def test_a_plan_split_into_log_scans_reads_every_file_once(spark, tmp_path, monkeypatch):
    """Past PART_FILES files a plan handed over as logs becomes several scans built side by
    side and unioned."""
    monkeypatch.setitem(file_index._INDEX_CLASSES, spark.sparkContext._gateway, None)
    monkeypatch.setattr(file_index, "PART_FILES", 7)
    monkeypatch.setattr(file_index.os, "cpu_count", lambda: 4)
    _table(tmp_path / "t")
    path = str(tmp_path / "t")
    snapshot = read_snapshot(spark, path)
    assert _relations(snapshot) == ["parquet"] * 4
    assert spark_rows(snapshot) == _rows(range(FILES), {0: DELETED})
    assert spark_rows(read_changes(spark, path, 1, 2, ignore_changes=True)) == (
        _rows(range(FILES)) + _rows(range(1), {0: DELETED}))


def test_the_index_source_is_read_from_the_zip_spark_submit_ships(tmp_path):
    import subprocess
    import sys

    from airflow_provider_delta.job.submit import JobFolder

    folder = JobFolder(None, None)
    try:
        code = ("import airflow_provider_delta.spark.file_index as m; "
                "assert '.zip' in m.__file__, m.__file__; "
                "print('class PlanFileIndex' in m.index_source())")
        ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=tmp_path, env={"PYTHONPATH": folder.package_zip()})
        assert ran.stdout.strip() == "True", ran.stderr
    finally:
        folder.remove()


def test_hidden_names_of_sliced_and_plain_paths():
    """Spark's hidden names, whether or not a path's bytes hold ``/.`` or ``/_`` (only then
    are the names split off), in slices of a longer array too."""
    paths = pa.array(["/t/.x/a.parquet", "/t/_p=1/b", "/t/_c", "/t/.d", "_e", "f", "/t/g",
                      "/t/_x=1"])
    expected = [False, False, True, True, True, False, False, False]
    for start in range(len(paths)):
        assert hidden_files(paths.slice(start)).to_pylist() == expected[start:]
        assert hidden_files(paths.slice(0, start)).to_pylist() == expected[:start]


def test_filters_on_partition_values_pick_their_files(spark, tmp_path, route, monkeypatch):
    """Partition values come as the index's partition values (on the index route), and Spark
    hands filters on them to the index alone: it must apply them. Past MAX_CONSTANT_ROWS
    distinct values they are looked up or joined as before."""
    _table(tmp_path / "t")
    path = str(tmp_path / "t")
    for rows in (file_index.MAX_CONSTANT_ROWS, 2):
        monkeypatch.setattr(file_index, "MAX_CONSTANT_ROWS", rows)
        picked = read_snapshot(spark, path).where("part IN ('a b', 'x=1') AND id >= 0")
        assert spark_rows(picked) == Counter({
            row: count for row, count in _rows(range(FILES), {0: DELETED}).items()
            if row[1] in ("a b", "x=1")})
        assert spark_rows(read_snapshot(spark, path).where("part IS NULL")) == Counter()


def test_partition_values_come_from_the_log_not_the_file(spark, tmp_path, route):
    """A writer may keep a partition column in its files too: the log's value is the row's."""
    table = tmp_path / "t"
    _table(table)
    file = table / "part=plain" / "kept.parquet"
    pq.write_table(pa.table({"id": pa.array([7], pa.int64()), "part": ["in the file"],
                             f"{file_index.CONSTANT_PREFIX}part": ["clash"]}), file)
    write_commit(table, 3, [{"add": {
        "path": "part=plain/kept.parquet", "partitionValues": {"part": "plain"},
        "size": file.stat().st_size, "modificationTime": 0, "dataChange": True}}])
    assert spark_rows(read_changes(spark, str(table), 3, 3)) == Counter({(7, "plain"): 1})


def test_constant_rows_by_value_nulls_and_float_signs():
    """Files group by equal values, nulls equal; -0.0 and 0.0 apart."""
    groups, firsts = file_index._groups([
        pa.array(["a", None, "a", None, "a"]), pa.array([0.0, 1.0, -0.0, 1.0, 0.0])])
    assert groups.tolist() == [groups[0], groups[1], groups[2], groups[1], groups[0]]
    assert len(set(groups.tolist())) == 3
    assert [groups[first] for first in firsts] == list(range(3))


def test_constants_of_every_partition_type_reach_the_rows(spark, tmp_path):
    """Each of Delta's partition types (and nulls, -0.0, NaN, non-ASCII text, bytes, wide
    decimals) comes through PlanFileIndex's partition values as the value it was."""
    paths = []
    for number in range(3):
        pq.write_table(pa.table({"id": pa.array([number], pa.int64())}), tmp_path / f"{number}")
        paths.append(str(tmp_path / f"{number}"))
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
    columns = {
        "s": (StringType(), pa.array(["é x", None, ""])),
        "b": (BinaryType(), pa.array([b"\x00\xff", b"", None])),
        "wide": (DecimalType(20, 3), pa.array(
            [Decimal("12345678901234567.125"), None, Decimal("-1.000")], pa.decimal128(20, 3))),
        "i": (IntegerType(), pa.array([1, -2**31, None], pa.int32())),
        "l": (LongType(), pa.array([2**62, None, -1], pa.int64())),
        "sh": (ShortType(), pa.array([7, None, -3], pa.int16())),
        "by": (ByteType(), pa.array([-128, 127, None], pa.int8())),
        "bo": (BooleanType(), pa.array([True, False, None])),
        "f": (FloatType(), pa.array([-0.0, 1.5, None], pa.float32())),
        "d": (DoubleType(), pa.array([float("nan"), -0.0, None], pa.float64())),
        "day": (DateType(), pa.array([dt.date(1, 1, 1), dt.date(2026, 11, 29), None])),
        "ts": (TimestampType(), pa.array([moment, None, moment], pa.timestamp("us", tz="UTC"))),
        "ntz": (TimestampNTZType(), pa.array(
            [dt.datetime(1900, 1, 1), None, dt.datetime(2026, 1, 1, 0, 0, 0, 1)])),
    }
    fields = [StructField(name, kind) for name, (kind, _) in columns.items()]
    values = pa.StructArray.from_arrays([array for _, array in columns.values()],
                                        names=list(columns))
    scan = file_index.constant_scan(
        spark, StructType([StructField("id", LongType())]), spark_file_paths(pa.array(paths)),
        pa.array([Path(path).stat().st_size for path in paths], pa.int64()), str(tmp_path),
        fields, values)
    got = scan.select("id", *(F.col(file_index.constant_column(name)).alias(name)
                              for name in columns)).toArrow().sort_by("id")
    for name, (_, array) in columns.items():
        # the bits, so NaN equals NaN and -0.0 differs from 0.0
        kept = got.column(name).combine_chunks()
        if pa.types.is_floating(array.type):
            kept, array = (pc.cast(a, pa.float64()).to_numpy(zero_copy_only=False).view("i8")
                           for a in (pc.fill_null(kept, 0.0), pc.fill_null(array, 0.0)))
            assert kept.tolist() == array.tolist(), name
        else:
            assert kept.cast(array.type).to_pylist() == array.to_pylist(), name
