"""A plan's files reach Spark as a file index (spark/file_index.py): every file read once, with
its own partition values and deletion vector, whatever its folder or name spelling. Each test
runs both routes: ``PlanFileIndex`` compiled in the JVM, and the ``_spark_metadata`` log a JVM
that cannot compile it gets."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.errors import UnsupportedFeatureError
from airflow_provider_delta.spark import file_index, read_changes, read_snapshot
from airflow_provider_delta.spark.file_index import hidden_files
from airflow_provider_delta.spark.handoff import LOOKUP_MAX_FILES
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
