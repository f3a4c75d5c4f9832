"""Which copy-on-write commits of a change feed are read by row id: row tracking enabled at the
version, ids preserved by the writer, baseRowId and defaultRowCommitVersion on every changed
file. Hand-written logs (the planner reads no data file); Delta's own tables are in
tests/delta_spark/test_row_tracking_feed.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_delta.core import plan_change_feed
from airflow_provider_delta.core.row_tracking import (
    MaterializedColumns, entries_with_gaps, materialized_columns, reported_removed_rows,
)

_COLUMNS = {"delta.rowTracking.materializedRowIdColumnName": "_row-id",
            "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-version"}
_ENABLED = {"delta.enableRowTracking": "true", **_COLUMNS}
_PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 7,
             "writerFeatures": ["domainMetadata", "rowTracking"]}


def _metadata(configuration: dict[str, str]) -> dict:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    return {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(schema), "partitionColumns": [],
                         "configuration": configuration}}


def _file(kind: str, name: str, base: int | None, version: int | None) -> dict:
    action = {"path": f"{name}.parquet", "partitionValues": {}, "size": 10, "dataChange": True,
              "stats": json.dumps({"numRecords": 5})}
    action.update({k: v for k, v in (("baseRowId", base), ("defaultRowCommitVersion", version))
                   if v is not None})
    return {kind: action}


def _write(path: Path, commits: list[list[dict]]) -> str:
    log = path / "_delta_log"
    log.mkdir(parents=True)
    for version, actions in enumerate(commits):
        (log / f"{version:020}.json").write_text("\n".join(json.dumps(a) for a in actions))
    return str(path)


def _rewrite(old: str, old_base: int, new: str, new_base: int | None, version: int,
             info: dict) -> list[dict]:
    info = {"commitInfo": {"operation": "UPDATE", **info}}
    return [info, _file("remove", old, old_base, 1), _file("add", new, new_base, version)]


def _table(path: Path, configuration=_ENABLED, rewrite_info=None, new_base=10) -> str:
    return _write(path, [
        [{"protocol": _PROTOCOL}, _metadata(configuration)],
        [_file("add", "a", 0, 1), _file("add", "b", 5, 1)],
        _rewrite("a", 0, "c", new_base, 2, rewrite_info or {}),
    ])


def test_rewrite_with_row_tracking_is_read_by_row_id(tmp_path):
    feed = plan_change_feed(_table(tmp_path), 0)
    assert [(c.version, c.net, c.row_tracking) for c in feed.commits] == [
        (1, False, None), (2, True, MaterializedColumns("_row-id", "_row-version"))]
    rows = feed.file_table.select(["version", "kind", "base_row_id",
                                   "default_row_commit_version"]).to_pylist()
    assert rows[2:] == [
        {"version": 2, "kind": "delete", "base_row_id": 0, "default_row_commit_version": 1},
        {"version": 2, "kind": "insert", "base_row_id": 10, "default_row_commit_version": 2}]


@pytest.mark.parametrize(("table", "reason"), [
    ({"configuration": {"delta.rowTrackingSuspended": "true", **_COLUMNS}}, "not enabled"),
    ({"configuration": {**_ENABLED, "delta.rowTrackingSuspended": "true"}}, "not enabled"),
    ({"configuration": {"delta.enableRowTracking": "true"}}, "not enabled"),
    ({"rewrite_info": {"tags": {"delta.rowTracking.preserved": "false"}}}, "did not preserve"),
    ({"new_base": None}, "no baseRowId"),
    ({"rewrite_info": {"operation": "RESTORE"}}, "RESTORE"),
])
def test_rewrite_falls_back_to_the_netting_diff_and_says_why(tmp_path, caplog, table, reason):
    with caplog.at_level(logging.INFO, logger="airflow_provider_delta.core.row_tracking"):
        feed = plan_change_feed(_table(tmp_path, **table), 0)
    assert [(c.version, c.net, c.row_tracking) for c in feed.commits] == [
        (1, False, None), (2, True, None)]
    assert "version(s) 2 are compared row by row" in caplog.text and reason in caplog.text


def test_row_tracking_needs_the_writer_feature():
    assert materialized_columns(_PROTOCOL, _ENABLED) == MaterializedColumns(
        "_row-id", "_row-version")
    assert materialized_columns({**_PROTOCOL, "writerFeatures": ["domainMetadata"]},
                                _ENABLED) is None


def _runs(*groups: tuple) -> pa.Table:
    """Runs of row ids as the Spark layer reduces them: (entry, offset, updated, first, last,
    rows, and the run where told apart, else 0) per group."""
    names = ("entry", "offset", "updated", "first", "last", "rows", "run")
    return pa.table({name: pa.array([(*g, 0)[i] for g in groups], pa.int64())
                     for i, name in enumerate(names)})


def _reported(runs: pa.Table, removed: list[bool], versions: list[int]) -> list[tuple]:
    found = reported_removed_rows(runs, np.array(removed), np.array(versions))
    return None if found is None else sorted(zip(found.entry.tolist(), found.row_index.tolist(),
                                                  found.preimage.tolist()))


def test_removed_rows_come_from_ranges_of_row_ids():
    # commit 5 rewrites file 0 (ids 100..199): deletes id 107, updates id 150 (same position
    # in the copy), copies the rest; commit 6 rewrites file 2 (ids 300..309, materialized
    # out of order) into file 3 and deletes nothing
    runs = _runs(
        (0, 100, None, 0, 99, 100),
        (1, 100, None, 0, 6, 7), (1, 101, None, 7, 98, 91), (1, 101, 49, 49, 49, 1),
        (2, 305, None, 0, 4, 5), (2, 295, None, 5, 9, 5),
        (3, 300, None, 0, 9, 10),
    )
    assert _reported(runs, [True, False, True, False], [5, 5, 6, 6]) == [
        (0, 7, False), (0, 50, True)]
    # the same ids copied by another commit do not count
    assert _reported(runs, [True, False, True, False], [5, 6, 6, 6]) == [
        (0, i, False) for i in range(100)]


def test_runs_sharing_an_offset_are_told_apart_by_position():
    # commit 1 rewrites files 0 (ids 0..9), 2 (ids 60..69) and 1 (ids 20..29, deleting 25)
    # into file 3 in that order: ids 0..9 at positions 0-9 and 20..24 at 20-24 share offset 0
    removed = [(0, 0, None, 0, 9, 10), (1, 20, None, 0, 9, 10), (2, 60, None, 0, 9, 10)]
    copied = [(3, 50, None, 10, 19, 10), (3, 1, None, 25, 28, 4)]
    grouped = _runs(*removed, *copied, (3, 0, None, 0, 24, 15))
    assert entries_with_gaps(grouped).tolist() == [3]
    assert _reported(grouped, [True, True, True, False], [1] * 4) is None
    split = _runs(*removed, *copied, (3, 0, None, 0, 9, 10, -1), (3, 0, None, 20, 24, 5, 9))
    assert entries_with_gaps(split).tolist() == []
    assert _reported(split, [True, True, True, False], [1] * 4) == [(1, 5, False)]
