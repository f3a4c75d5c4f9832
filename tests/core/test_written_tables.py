"""The core on tables written here with deltalake, for cases the shared tables lack."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import (
    commit_timestamp, latest_version, plan_changes, plan_snapshot, split_batches, version_at,
)
from airflow_provider_delta.errors import (
    DeltaProviderError, InvalidParameterError, LogGapError, SchemaChangeError, TableNotFoundError,
    VersionNotAvailableError,
)
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.probe import VersionProbe
from tests.conftest import URL_CHARACTERS
from tests.core.conftest import data_change_adds


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


@pytest.fixture(scope="module")
def thousand_commits(tmp_path_factory) -> str:
    """1,000 one-row appends, with deltalake checkpoints at 100 and 500.

    deltalake creates the table; commits 1..999 are appended the way a Delta writer does
    (Parquet file, then a commit JSON), because 1,000 ``write_deltalake`` calls take ~90 s.
    deltalake itself then reads the result back as the check that the log is valid.
    """
    path = Path(tmp_path_factory.mktemp("thousand")) / "t"
    write_deltalake(str(path), _rows(0))
    for version in range(1, 1000):
        _append_commit(path, version, _rows(version))
        if version in (100, 500):
            DeltaTable(str(path), version=version).create_checkpoint()
    assert DeltaTable(str(path)).version() == 999
    return str(path)


def _append_commit(path: Path, version: int, rows: pa.Table) -> None:
    name = f"part-{version:05d}.parquet"
    pq.write_table(rows, path / name)
    add = {"path": name, "size": (path / name).stat().st_size, "partitionValues": {},
           "modificationTime": 1_700_000_000_000 + version, "dataChange": True,
           "stats": json.dumps({"numRecords": rows.num_rows})}
    info = {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE",
            "operationParameters": {"mode": "Append"}}
    lines = [json.dumps({"commitInfo": info}), json.dumps({"add": add})]
    (path / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def test_thousand_commits_latest_and_ranges(thousand_commits):
    path = thousand_commits
    assert latest_version(path) == 999
    assert latest_version(path, since=500) == 999
    plan = plan_changes(path, 0)
    assert [f.version for f in plan] == list(range(1000))
    assert plan.end_version == 999
    tail = plan_changes(path, 950, 999)
    assert [f.path for f in tail] == [p for v in range(950, 1000) for p in data_change_adds(path, v)]


def test_thousand_commits_batches_have_no_holes(thousand_commits):
    plan = plan_changes(thousand_commits, 100, 399)
    batches = split_batches(plan, max_files=64)
    assert [len(b) for b in batches] == [64] * 4 + [44]
    assert batches[0].start_version == 100 and batches[-1].end_version == 399
    for before, after in zip(batches, batches[1:]):
        assert after.start_version == before.end_version + 1


def test_snapshot_at_every_hundredth_version_matches_deltalake(thousand_commits):
    for version in (0, 99, 100, 101, 550, 999):
        ours = sorted(f.path for f in plan_snapshot(thousand_commits, version=version))
        assert ours == sorted("file://" + p for p in DeltaTable(thousand_commits, version=version)
                              .file_uris())


def test_a_table_in_a_folder_named_like_a_url(url_characters_table):
    """Every reader of the log finds the table in its own folder, not where a URL would end."""
    path, copy = url_characters_table
    adds = {v: data_change_adds(path, v) for v in range(3)}
    live = sorted(f"file://{u}".replace(copy, path) for u in DeltaTable(copy).file_uris())
    head_ms = os.stat(Path(path, "_delta_log", f"{2:020d}.json")).st_mtime_ns // 1_000_000
    for table_uri in (path, f"file://{path}"):
        assert latest_version(table_uri) == 2
        assert [f.path for f in plan_changes(table_uri, 1, 2).files] == adds[1] + adds[2]
        assert sorted(f.path for f in plan_snapshot(table_uri).files) == live
        probe = VersionProbe(table_uri)
        assert probe.new_range(1, probe.latest(0)) == {
            "table_uri": table_uri, "start_version": 1, "end_version": 2,
            "latest_commit_timestamp": head_ms}
        store = TableLocation(table_uri).store  # how object stores are read
        assert sorted(m["path"] for c in obstore.list(store, prefix="_delta_log/") for m in c) == [
            f"_delta_log/{v:020d}.json" for v in range(3)]
    assert len(live) == 6 and all(f"/{URL_CHARACTERS}/part=" in u for u in live)


def test_vacuumed_file_is_still_planned_from_the_log(tmp_path):
    """The log keeps naming a vacuumed file; the Spark layer turns that into MissingDataFileError."""
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(1, 2))
    write_deltalake(path, _rows(3), mode="overwrite")
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    old = plan_changes(path, 0, 0)
    assert len(old) == 1 and not os.path.exists(old.files[0].path[len("file://"):])
    live = plan_snapshot(path)
    assert all(os.path.exists(f.path[len("file://"):]) for f in live)
    with pytest.raises(Exception, match="ignore_changes"):
        plan_changes(path, 0, 1)


@pytest.mark.parametrize("with_json", [True, False])
def test_row_counts_from_a_checkpoint_with_stats_as_a_struct(tmp_path, with_json):
    """deltalake's ``writeStatsAsStruct`` checkpoint: the row counts come from
    ``stats_parsed`` (the only statistics it holds without ``writeStatsAsJson``), the
    partition values and protocol (written after the files) as from any other."""
    path = str(tmp_path / "t")
    config = {"delta.checkpoint.writeStatsAsStruct": "true",
              "delta.checkpoint.writeStatsAsJson": str(with_json).lower()}
    write_deltalake(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"],
                    configuration=config)
    write_deltalake(path, pa.table({"id": [3, 4, 5], "p": ["c"] * 3}), mode="append")
    DeltaTable(path).create_checkpoint()
    add = pq.read_schema(Path(path, "_delta_log", f"{1:020d}.checkpoint.parquet")).field("add")
    assert "stats_parsed" in add.type.names and ("stats" in add.type.names) == with_json
    files = plan_snapshot(path).file_table.sort_by("num_records")
    assert files.column("num_records").to_pylist() == [1, 1, 3]
    assert files.column("partition_values").to_pylist()[2] == {"p": "c"}


def test_cleaned_log_window(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0), configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    table = DeltaTable(path)
    for i in range(1, 6):
        write_deltalake(table, _rows(i), mode="append")
    table.create_checkpoint()
    table.cleanup_metadata()
    assert not (Path(path) / "_delta_log" / f"{0:020d}.json").exists()
    assert latest_version(path) == 5
    write_deltalake(path, _rows(6), mode="append")
    assert latest_version(path, since=5) == 6
    assert [f.version for f in plan_changes(path, 5)] == [5, 6]
    assert len(plan_snapshot(path, version=5)) == 6
    with pytest.raises(VersionNotAvailableError) as caught:
        plan_changes(path, 2, 6)
    assert (caught.value.earliest, caught.value.latest) == (5, 6)
    with pytest.raises(VersionNotAvailableError):
        version_at(path, dt.datetime(2000, 1, 1))


def test_missing_commit_after_a_checkpoint_is_a_gap(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    for i in range(1, 5):
        write_deltalake(path, _rows(i), mode="append")
    os.remove(Path(path) / "_delta_log" / f"{3:020d}.json")
    with pytest.raises(LogGapError) as caught:
        plan_changes(path, 1, 4)
    assert caught.value.missing == [3]
    with pytest.raises(LogGapError):
        latest_version(path)


def test_version_beyond_latest_names_the_window(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    with pytest.raises(VersionNotAvailableError) as caught:
        plan_changes(path, 3)
    assert (caught.value.earliest, caught.value.latest) == (0, 0)
    with pytest.raises(VersionNotAvailableError):
        plan_snapshot(path, version=1)
    with pytest.raises(VersionNotAvailableError):
        plan_changes(path, 0, 2)


def test_not_a_table(tmp_path):
    with pytest.raises(TableNotFoundError):
        latest_version(str(tmp_path))
    with pytest.raises(TableNotFoundError):
        plan_snapshot(str(tmp_path / "nothing"))


def test_bad_arguments(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    uri = plan_changes(path, 0).table_uri
    calls = [
        (lambda: plan_changes(path, -1), "start_version=-1 is not a version number >= 0"),
        (lambda: plan_changes(path, 1, 0), "end_version=0 is before start_version=1"),
        (lambda: split_batches(plan_changes(path, 0), max_files=0), "max_files=0 is below 1"),
        (lambda: plan_snapshot(path, version=0, timestamp="2020-01-01"),
         "give version or timestamp, not both"),
        (lambda: plan_snapshot(path, version=-2), "version=-2 is not a version number"),
        (lambda: version_at(path, "yesterday"), "timestamp='yesterday' is not ISO-8601"),
    ]
    for call, message in calls:
        # A DeltaProviderError naming the table, and a ValueError for code that catches those.
        with pytest.raises(InvalidParameterError, match=message) as caught:
            call()
        assert isinstance(caught.value, DeltaProviderError) and isinstance(caught.value, ValueError)
        assert str(caught.value).startswith(f"{caught.value.table_uri}: ")
        assert caught.value.table_uri in (path, uri)


def test_added_nullable_column_is_additive(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    write_deltalake(path, pa.table({"id": [1], "name": ["x"]}), mode="append", schema_mode="merge")
    plan = plan_changes(path, 0, 1)
    assert [f.metadata.schema["fields"][-1]["name"] for f in plan] == ["id", "name"]
    assert [len(b.metadata.schema["fields"]) for b in split_batches(plan, max_files=1)] == [1, 2]


@pytest.mark.parametrize("new_table, detail", [
    (pa.table({"id": pa.array(["a"], pa.string())}), "changed type"),
    (pa.table({"other": pa.array([1], pa.int64())}), "dropped or renamed"),
])
def test_non_additive_change_names_the_version(tmp_path, new_table, detail):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    write_deltalake(path, _rows(1), mode="append")
    write_deltalake(path, new_table, mode="overwrite", schema_mode="overwrite")
    with pytest.raises(SchemaChangeError, match=detail) as caught:
        plan_changes(path, 1, 2, ignore_changes=True)
    assert caught.value.version == 2
    assert len(plan_changes(path, 2, 2, ignore_changes=True)) == 1  # a range starting there is fine


def test_commit_times_are_made_strictly_increasing(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    for i in range(1, 4):
        write_deltalake(path, _rows(i), mode="append")
    same = 1_700_000_000.0  # every commit file gets the same modification time
    for version in range(4):
        os.utime(Path(path) / "_delta_log" / f"{version:020d}.json", (same, same))
    times = [commit_timestamp(path, v) for v in range(4)]
    assert times == [1_700_000_000_000 + v for v in range(4)]
    moment = dt.datetime.fromtimestamp(same, dt.timezone.utc)
    assert version_at(path, moment) == 0
    assert version_at(path, moment + dt.timedelta(microseconds=2000)) == 2
    assert version_at(path, "2023-11-14T22:13:20.003Z") == 3
    with pytest.raises(VersionNotAvailableError):
        version_at(path, moment + dt.timedelta(seconds=1))
    with pytest.raises(VersionNotAvailableError):
        version_at(path, moment - dt.timedelta(seconds=1))


def test_in_commit_timestamps_win_over_file_times(tmp_path):
    """A table whose writer enabled in-commit timestamps at version 2 (hand-written log lines)."""
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    write_deltalake(path, _rows(1), mode="append")
    log_dir = Path(path) / "_delta_log"
    metadata = json.loads(next(line for line in (log_dir / f"{0:020d}.json").read_text().splitlines()
                               if "metaData" in line))["metaData"]
    metadata["configuration"] = {"delta.enableInCommitTimestamps": "true",
                                 "delta.inCommitTimestampEnablementVersion": "2",
                                 "delta.inCommitTimestampEnablementTimestamp": "1800000000000"}
    commits = {
        2: [{"commitInfo": {"inCommitTimestamp": 1_800_000_000_000, "operation": "SET TBLPROPERTIES"}},
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                          "writerFeatures": ["inCommitTimestamp"]}},
            {"metaData": metadata}],
        3: [{"commitInfo": {"inCommitTimestamp": 1_800_000_060_000, "operation": "WRITE"}}],
    }
    for version, actions in commits.items():
        (log_dir / f"{version:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    for version in range(4):  # file times far later than the ICTs: they must be ignored from v2
        os.utime(log_dir / f"{version:020d}.json", (1_900_000_000, 1_900_000_000))
    os.utime(log_dir / f"{0:020d}.json", (1_700_000_000, 1_700_000_000))
    os.utime(log_dir / f"{1:020d}.json", (1_700_000_100, 1_700_000_100))
    assert commit_timestamp(path, 3) == 1_800_000_060_000
    assert commit_timestamp(path, 1) == 1_700_000_100_000
    ict = dt.datetime.fromtimestamp(1_800_000_030, dt.timezone.utc)
    assert version_at(path, ict) == 2
    assert version_at(path, ict.replace(tzinfo=None) + dt.timedelta(seconds=30)) == 3
    assert version_at(path, dt.datetime.fromtimestamp(1_750_000_000, dt.timezone.utc)) == 1
