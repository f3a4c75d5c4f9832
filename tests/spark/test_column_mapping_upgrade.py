"""Column mapping switched on inside a range (issues 12.13 and 15.4), as Delta's
DeltaSourceColumnMappingSuite "allowed workflows - upgrade to name mode" does it: files written
before the switch use the logical names, which become the physical names. deltalake writes the
data; the upgrade, the added column and the rename are log commits written here, as Delta
writes them (deltalake cannot alter column mapping).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import plan_change_feed, plan_changes
from airflow_provider_delta.errors import SchemaChangeError
from airflow_provider_delta.spark import read_change_feed, read_changes, read_snapshot
from tests.conftest import NAME_MAPPING_PROTOCOL, upgraded_to_name_mapping
from tests.core.conftest import commit_actions
from tests.spark.conftest import oracle_rows, spark_rows, write_commit

UPGRADE, ADD_COLUMN, RENAME = 2, 4, 6
_FEED_COLUMNS = ["_change_type", "_commit_version", "_commit_timestamp"]


def _rows(first_id: int, name_column: str = "name", **extra: list) -> pa.Table:
    return pa.table({
        "id": [first_id, first_id + 1], name_column: [f"n{first_id}", None],
        "info": pa.array([{"a": first_id}, None], pa.struct([("a", pa.int64())])),
        "region": ["eu", "us"], **extra,
    })


def _append(path: str, rows: pa.Table) -> None:
    write_deltalake(path, rows, partition_by=["region"], mode="append")


def _latest_metadata(path: str, version: int) -> dict:
    return next(a["metaData"] for v in range(version, -1, -1)
                for a in commit_actions(path, v) if "metaData" in a)


def _schema_change(path: str, version: int, change) -> None:
    """Commit ``version``: the latest metaData with ``change`` applied to its fields."""
    meta = _latest_metadata(path, version - 1)
    schema = json.loads(meta["schemaString"])
    change(schema["fields"], meta["configuration"])
    write_commit(path, version, [{"metaData": dict(meta, schemaString=json.dumps(schema))}])


def _add_score(fields: list[dict], configuration: dict) -> None:
    column_id = int(configuration["delta.columnMapping.maxColumnId"]) + 1
    configuration["delta.columnMapping.maxColumnId"] = str(column_id)
    fields.append({"name": "score", "type": "double", "nullable": True, "metadata": {
        "delta.columnMapping.id": column_id,
        "delta.columnMapping.physicalName": f"col-{uuid.uuid4()}"}})


def _rename_name(fields: list[dict], configuration: dict) -> None:
    next(f for f in fields if f["name"] == "name")["name"] = "full_name"


def upgraded_table(path: str) -> None:
    """v0, v1 appends without column mapping; v2 the upgrade to name mode; v3 an append; v4
    adds a column (new physical name); v5 an append; v6 renames a column; v7 an append."""
    write_deltalake(path, _rows(0), partition_by=["region"])
    _append(path, _rows(10))
    write_commit(path, UPGRADE, [NAME_MAPPING_PROTOCOL,
                                 {"metaData": upgraded_to_name_mapping(_latest_metadata(path, 0))}])
    _append(path, _rows(20))
    _schema_change(path, ADD_COLUMN, _add_score)
    _append(path, _rows(30, score=[1.5, None]))
    _schema_change(path, RENAME, _rename_name)
    _append(path, _rows(40, name_column="full_name", score=[2.5, 3.5]))


def _added(path: str, start: int, end: int) -> Counter:
    """The oracle's rows of ``end`` minus those of ``start - 1``, NULL-padded to ``end``'s width."""
    rows = oracle_rows(path, end)
    if start == 0:
        return rows
    width = len(next(iter(rows)))
    before = Counter({r + (None,) * (width - len(r)): n for r, n in oracle_rows(
        path, start - 1).items()})
    return rows - before


def test_ranges_across_the_upgrade_to_name_mode(spark, tmp_path, assert_same_rows):
    path = str(tmp_path / "t")
    upgraded_table(path)
    for version in (UPGRADE + 1, RENAME + 1):  # files from both sides of the switch
        assert_same_rows(spark_rows(read_snapshot(spark, path, version=version)),
                         oracle_rows(path, version))
    for start, end in ((0, RENAME - 1), (1, UPGRADE + 1), (UPGRADE, ADD_COLUMN + 1),
                       (RENAME, RENAME + 1)):
        df = read_changes(spark, path, start, end)
        assert_same_rows(spark_rows(df), _added(path, start, end))
    assert df.columns == ["id", "full_name", "info", "region", "score"]


def test_rename_after_the_upgrade_in_the_same_range_is_refused(tmp_path):
    path = str(tmp_path / "t")
    upgraded_table(path)
    with pytest.raises(SchemaChangeError, match="'name' was dropped or renamed") as caught:
        plan_changes(path, 0, RENAME + 1)
    assert caught.value.version == RENAME


def test_feed_before_a_later_upgrade_and_rename_has_its_end_schema(spark, tmp_path,
                                                                    assert_same_rows):
    """Delta's CDF reader (``CDCReaderBase.getCDCRelation`` choosing the schema through
    ``getBatchSchemaModeForTable``) reads a range with its end version's schema when column
    mapping is on at the range's start, its end or the table's latest version. Here it is on
    only at the latest version (upgraded at v2, renamed at v6), so the range 0..1 is read with
    v1's names; following the schema up to the rename would refuse it."""
    path = str(tmp_path / "t")
    upgraded_table(path)
    feed = read_change_feed(spark, path, 0, UPGRADE - 1)
    assert feed.columns == ["id", "name", "info", "region", *_FEED_COLUMNS]
    got = spark_rows(feed.drop("_commit_timestamp"))
    expected = Counter({row + ("insert", version): n for version in (0, 1)
                        for row, n in _added(path, version, version).items()})
    assert_same_rows(got, expected)
    # a range ending where mapping is on: the end version's schema too
    assert read_change_feed(spark, path, 0, ADD_COLUMN).columns == [
        "id", "name", "info", "region", "score", *_FEED_COLUMNS]


def test_feed_of_a_table_never_mapped_still_has_the_latest_schema(tmp_path):
    """The other branch of the same rule: no column mapping at the start, the end or the
    latest version, so the latest schema (a column added after the range)."""
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0), partition_by=["region"])
    write_deltalake(path, _rows(10, score=[1.0, 2.0]), mode="append", schema_mode="merge")
    assert [f["name"] for f in plan_change_feed(path, 0, 0).metadata.schema["fields"]] == [
        "id", "name", "info", "region", "score"]
