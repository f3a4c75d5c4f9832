"""Missing commits after a known version: data loss that must fail, not stall or shrink a range."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import latest_version, plan_changes
from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.errors import LogGapError, VersionNotAvailableError
from airflow_provider_delta.sensors import DeltaVersionSensor


def appended_table(folder: Path, versions: int) -> str:
    """A table of one-row appends, versions 0..versions-1, written by deltalake."""
    path = str(folder / "t")
    for version in range(versions):
        write_deltalake(path, pa.table({"id": pa.array([version], pa.int64())}),
                        mode="append")
    return path


def remove_commit(table: str, version: int) -> None:
    os.remove(Path(table) / "_delta_log" / f"{version:020d}.json")


def test_hole_after_the_known_version_is_a_gap_not_the_head(tmp_path, monkeypatch):
    """Commit 7 missing, 8..13 present: the probe from 6 used to answer 6 for ever."""
    path = appended_table(tmp_path, 14)
    remove_commit(path, 7)
    with pytest.raises(LogGapError) as caught:
        latest_version(path, since=6)
    assert caught.value.missing == [7] and path in str(caught.value)
    with pytest.raises(LogGapError, match="commit\\(s\\) 7 are missing"):
        VersionProbe(path).latest(since=6)
    monkeypatch.setenv("AIRFLOW_VAR_GAP_WM", json.dumps({path: 6}))  # a real Variable, no DB
    sensor = DeltaVersionSensor(task_id="sense", table_uri=path, watermark_store="variable",
                                watermark_key="gap_wm")
    with pytest.raises(LogGapError):  # permanent: the poke fails instead of waiting
        sensor.poke({})


def test_hole_behind_a_checkpoint_is_still_a_gap_after_the_known_version(tmp_path):
    path = appended_table(tmp_path, 6)
    DeltaTable(path).create_checkpoint()  # at 5: rebuilding 5 needs no commit below it
    remove_commit(path, 3)
    assert latest_version(path) == 5  # the state at the head is whole
    with pytest.raises(LogGapError) as caught:
        latest_version(path, since=2)
    assert caught.value.missing == [3]


def test_commits_written_after_an_idle_probe_reveal_the_hole(tmp_path):
    """An idle table is remembered by its folder's mtime; a new entry must end that."""
    path = appended_table(tmp_path, 7)
    log_dir = Path(path) / "_delta_log"
    settled = time.time() - 3600
    os.utime(log_dir, (settled, settled))
    probe = VersionProbe(path)
    assert probe.latest(since=6) == 6
    assert probe.latest(since=6) == 6  # answered from the remembered listing
    for version in range(7, 10):
        write_deltalake(path, pa.table({"id": pa.array([version], pa.int64())}), mode="append")
    remove_commit(path, 7)
    with pytest.raises(LogGapError) as caught:
        probe.latest(since=6)
    assert caught.value.missing == [7]


def test_gap_inside_an_open_range_is_refused(tmp_path):
    """Commits 0..3, checkpoint at 3, 2.json missing: an open range from 1 ends at 3, not 1
    (Delta fails it with DELTA_MISSING_FILES_UNEXPECTED_VERSION)."""
    path = appended_table(tmp_path, 4)
    DeltaTable(path).create_checkpoint()
    remove_commit(path, 2)
    with pytest.raises(LogGapError) as caught:
        plan_changes(path, 1)
    assert caught.value.missing == [2]
    with pytest.raises(LogGapError) as explicit:
        plan_changes(path, 1, 3)
    assert explicit.value.missing == [2]


def test_shared_versions_not_contiguous_open_range(shared_table):
    path = shared_table("delta-golden/versions-not-contiguous")  # 1.json deleted
    with pytest.raises(LogGapError) as caught:
        plan_changes(path, 0)
    assert caught.value.missing == [1]


def _table_with_cleaned_first_commit(folder: Path, last_commit: pa.Table | None) -> str:
    """DeltaSourceSuite "startingVersion": ids 0..9 at version 0, 10..19 at version 1, then a
    commit at 2 (the suite's disableLogCleanup property change, or ``last_commit`` appended
    with its schema merged), a checkpoint at 2, and 0.json deleted."""
    path = str(folder / "t")
    write_deltalake(path, pa.table({"id": pa.array(range(10), pa.int64())}))
    write_deltalake(path, pa.table({"id": pa.array(range(10, 20), pa.int64())}), mode="append")
    if last_commit is None:
        DeltaTable(path).alter.set_table_properties({"delta.enableExpiredLogCleanup": "false"})
    else:
        write_deltalake(path, last_commit, mode="append", schema_mode="merge")
    DeltaTable(path).create_checkpoint()
    remove_commit(path, 0)
    return path


def test_start_whose_earlier_commits_are_gone_is_read_from_its_commit(tmp_path):
    """DeltaSourceSuite "startingVersion": "Can start from version 1 even if it's not
    recreatable" -- the rows of version 1 (10..19) are read; version 0 cannot be."""
    import pyarrow.parquet as pq

    path = _table_with_cleaned_first_commit(tmp_path, None)
    plan = plan_changes(path, 1)
    assert (plan.start_version, plan.end_version) == (1, 2)
    ids = [i for f in plan for i in pq.read_table(f.path[len("file://"):])["id"].to_pylist()]
    assert sorted(ids) == list(range(10, 20))
    assert [field["name"] for field in plan.metadata.schema["fields"]] == ["id"]
    with pytest.raises(VersionNotAvailableError):
        plan_changes(path, 0)


def test_start_takes_the_schema_of_the_first_later_version_that_has_one(tmp_path):
    """Version 2 adds a column: version 1 is read with it, its rows NULL there (as Delta
    reads a range with the schema of a later snapshot)."""
    extra = pa.table({"id": pa.array([20], pa.int64()), "name": pa.array(["x"])})
    path = _table_with_cleaned_first_commit(tmp_path, extra)
    plan = plan_changes(path, 1)
    assert [f.version for f in plan] == [1, 2]
    assert [field["name"] for field in plan.files[0].metadata.schema["fields"]] == ["id", "name"]


def test_start_is_refused_when_nothing_left_tells_its_schema(tmp_path):
    """No checkpoint after the start, and its commit only appends: nothing tells the schema."""
    path = appended_table(tmp_path, 3)
    remove_commit(path, 0)
    with pytest.raises(VersionNotAvailableError, match="neither commit 1 nor a checkpoint") as caught:
        plan_changes(path, 1)
    assert caught.value.version == 1 and path in str(caught.value)
