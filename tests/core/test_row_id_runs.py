"""Runs of row ids told on the driver from a changed file's Parquet footer and, where a row
group is not one run, its materialized columns: each run expanded back to rows must give
every row's id and whether the commit wrote it (positions too, where they matter). Files
written by pyarrow with chosen row groups; Delta's own files are in
tests/delta_spark/test_row_tracking_feed.py."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.core import row_id_runs
from airflow_provider_delta.core.row_id_runs import ChangedFile, file_runs
from airflow_provider_delta.core.row_tracking import MaterializedColumns
from airflow_provider_delta.errors import MissingDataFileError

_COLUMNS = MaterializedColumns("_row-id", "_row-version")
_BASE, _VERSION = 1000, 7  # the file's baseRowId and commit


def _write(path, ids: list | None, versions: list | None, group_rows: int) -> str:
    rows = len(ids if ids is not None else versions)
    columns = {"id": pa.array(np.arange(rows))}
    if ids is not None:
        columns[_COLUMNS.row_id] = pa.array(ids, pa.int64())
    if versions is not None:
        columns[_COLUMNS.row_commit_version] = pa.array(versions, pa.int64())
    pq.write_table(pa.table(columns), str(path), row_group_size=group_rows)
    return str(path)


def _runs(path: str, *, added: bool, default: int = _VERSION) -> pa.Table:
    file = ChangedFile(f"file://{path}", 0, _VERSION, default, added)
    return file_runs(file, _COLUMNS, "file:///table", None)


def _rows(runs: pa.Table) -> list[tuple[int, int | None, bool]]:
    """(position, id, written by the commit) of every row the runs hold; an id not
    materialized is the base plus the position."""
    rows = []
    for run in runs.to_pylist():
        assert run["last"] - run["first"] + 1 == run["rows"]  # a run is whole
        for position in range(run["first"], run["last"] + 1):
            offset = _BASE if run["offset"] is None else run["offset"]
            rows.append((position, offset + position, run["current"]))
    return rows


def _expected(ids: list | None, versions: list | None, *, added: bool, default: int = _VERSION
              ) -> list[tuple[int, int, bool]]:
    rows = len(ids if ids is not None else versions)
    ids = ids or [None] * rows
    versions = versions or [None] * rows
    return [(p, _BASE + p if i is None else i,
             added and (default if v is None else v) == _VERSION)
            for p, (i, v) in enumerate(zip(ids, versions))]


@pytest.fixture
def reads(monkeypatch) -> list:
    """The row groups whose columns are read (the footer did not tell them)."""
    groups, real = [], row_id_runs._read_runs
    monkeypatch.setattr(row_id_runs, "_read_runs", lambda parquet, group, *args: groups.append(
        group) or real(parquet, group, *args))
    return groups


def test_a_removed_file_without_materialized_ids_is_a_run_per_row_group(tmp_path, reads):
    path = _write(tmp_path / "a.parquet", None, [3] * 25, group_rows=10)
    runs = _runs(path, added=False)
    assert runs.num_rows == 3 and not reads
    assert _rows(runs) == _expected(None, [3] * 25, added=False)


def test_a_removed_file_with_some_materialized_ids_is_read_by_position(tmp_path, reads):
    ids = [5, 6, 7, None, None, 20, 21, 9, 10, 11, 12, None]
    path = _write(tmp_path / "a.parquet", ids, [2] * len(ids), group_rows=6)
    runs = _runs(path, added=False)
    assert reads == [0, 1]
    assert _rows(runs) == _expected(ids, [2] * len(ids), added=False)


def test_an_added_files_copied_range_is_told_by_its_footer_whatever_its_order(tmp_path, reads):
    # row groups: ids with a gap (read), a whole range shuffled (the footer), a whole range
    # with one row the commit wrote (read: its position matters)
    ids = [0, 1, 2, 4, 5, 6] + [13, 11, 12, 10, 15, 14] + [20, 21, 22, 23, 24, 25]
    versions = [3] * 6 + [4] * 6 + [3, 3, _VERSION, 3, 3, 3]
    path = _write(tmp_path / "a.parquet", ids, versions, group_rows=6)
    runs = _runs(path, added=True)
    assert reads == [0, 2]
    expected = _expected(ids, versions, added=True)
    assert Counter((i, c) for _, i, c in _rows(runs)) == Counter((i, c) for _, i, c in expected)
    # the written row with a preserved id (an update's new image) is a run of its own, with
    # its position
    updated = runs.filter(runs["current"]).to_pylist()
    assert [(r["position"], r["offset"] + r["position"], r["rows"]) for r in updated] == [
        (14, 22, 1)]


def test_row_versions_are_read_only_where_the_footer_leaves_them_unknown(tmp_path,
                                                                         monkeypatch):
    # both groups have gaps in their ids; only the second holds a row the commit wrote
    read, real = [], pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, group, columns=None,
                        **options: read.append(columns) or real(self, group, columns, **options))
    ids = [0, 1, 2, 4, 5, 6] + [10, 11, 13, 14, 15, 16]
    versions = [3] * 6 + [3, 3, _VERSION, 3, 3, 3]
    path = _write(tmp_path / "a.parquet", ids, versions, group_rows=6)
    runs = _runs(path, added=True)
    assert read == [[_COLUMNS.row_id], [_COLUMNS.row_id, _COLUMNS.row_commit_version]]
    assert _rows(runs) == _expected(ids, versions, added=True)


def test_an_added_files_new_and_updated_rows_are_the_commits(tmp_path, reads):
    # copied rows, then updated rows (ids kept, versions null: the file's default, the
    # commit), then inserted rows (neither materialized)
    ids = [0, 1, 2, 3, 50, 52, None, None, None, None]
    versions = [1, 1, 1, 1, None, None, None, None, None, None]
    path = _write(tmp_path / "a.parquet", ids, versions, group_rows=4)
    runs = _runs(path, added=True)
    assert reads == [1]  # the last group, new rows alone, is told by its footer
    assert _rows(runs) == _expected(ids, versions, added=True)
    updated = runs.filter(pa.compute.and_(runs["current"], runs["offset"].is_valid()))
    assert updated["position"].to_pylist() == [4, 5]
    # a file of new rows alone is told by its footer: one run the commit wrote
    inserted = _write(tmp_path / "b.parquet", None, [None] * 8, group_rows=8)
    assert _rows(_runs(inserted, added=True)) == _expected(None, [None] * 8, added=True)
    assert reads == [1]


def test_an_added_file_of_an_older_default_version_is_copied(tmp_path, reads):
    # ids not materialized but rows not the commit's: the file's default version is older
    path = _write(tmp_path / "a.parquet", [None] * 6, None, group_rows=6)
    assert _rows(_runs(path, added=True, default=2)) == _expected(
        [None] * 6, None, added=True, default=2)


def test_a_missing_file_is_a_missing_data_file_error(tmp_path):
    with pytest.raises(MissingDataFileError, match="gone.parquet"):
        _runs(str(tmp_path / "gone.parquet"), added=True)


def test_a_file_in_an_object_store_is_read_by_ranges(tmp_path, s3_options, upload):
    ids = [0, 1, 2, 4, 5, 6, 13, 11, 12, 10]
    versions = [3] * 10
    folder = tmp_path / "table"
    folder.mkdir()
    _write(folder / "a.parquet", ids, versions, group_rows=6)
    uri = upload(str(folder), "row-id-runs")
    for size in (0, (folder / "a.parquet").stat().st_size):  # 0: unknown, looked up
        file = ChangedFile(f"{uri}/a.parquet", size, _VERSION, _VERSION, True)
        runs = file_runs(file, _COLUMNS, uri, s3_options)
        assert runs == _runs(str(folder / "a.parquet"), added=True)
    with pytest.raises(MissingDataFileError):
        file_runs(ChangedFile(f"{uri}/gone.parquet", 0, _VERSION, _VERSION, True), _COLUMNS,
                  uri, s3_options)
