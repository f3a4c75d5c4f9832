"""plan_change_feed: which files carry each commit's changes, and the range and schema rules."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import plan_change_feed, split_feed
from airflow_provider_delta.errors import (
    InvalidParameterError, SchemaChangeError, VersionNotAvailableError,
)
from tests.core.conftest import append_unchanged_merge, commit_actions

CDF_ON = {"delta.enableChangeDataFeed": "true"}


def _files(plan, version: int) -> list[dict]:
    """The feed's files of one commit, as rows of its file table."""
    return [row for row in plan.file_table.to_pylist() if row["version"] == version]


def _kinds(plan) -> dict[int, list[str]]:
    return {c.version: sorted(f["kind"] for f in _files(plan, c.version)) for c in plan.commits}


def test_cdf_table_commits_use_their_change_data_files(shared_table):
    path = shared_table("delta-rs/cdf-table")
    plan = plan_change_feed(path, 0)
    assert _kinds(plan) == {0: ["insert"] * 10, 1: ["cdc"] * 6, 2: ["cdc"] * 6, 3: ["cdc"]}
    assert all(c.change_data_feed and not c.net for c in plan.commits)
    cdc_paths = {f["path"] for f in _files(plan, 1)}
    expected = {f"file://{path}/{a['cdc']['path']}" for a in commit_actions(path, 1) if "cdc" in a}
    assert cdc_paths == expected
    assert _files(plan, 1)[0]["partition_values"] == {"birthday": pa.scalar(
        19713, pa.date32()).as_py()}


def test_data_change_false_commit_gives_nothing(shared_table):
    path = shared_table("delta-golden/commit-info-containing-arbitrary-operationParams-types")
    plan = plan_change_feed(path, 0)
    assert [c.version for c in plan.commits] == [0, 1]  # v2 is an OPTIMIZE (dataChange=false)
    assert plan.end_version == 2


def test_copy_on_write_commits_without_cdf_are_netted(shared_table):
    path = shared_table("delta-golden/basic-with-inserts-merge")
    plan = plan_change_feed(path, 0)
    assert [(c.version, c.change_data_feed, c.net) for c in plan.commits] == [
        (0, False, False), (1, False, True)]
    assert _kinds(plan)[1] == ["delete", "delete", "insert"]


def test_deletion_vector_rewrites_are_vector_changes(shared_table):
    path = shared_table("delta-golden/dv-partitioned-with-checkpoint")
    plan = plan_change_feed(path, 1, 8)
    assert all(_kinds(plan)[v] == ["vector"] for v in range(1, 9))
    first, sixth = _files(plan, 1)[0], _files(plan, 6)[0]
    assert first["previous_vector"] is None and first["deletion_vector"]["cardinality"] == 1
    assert (sixth["previous_vector"]["cardinality"],
            sixth["deletion_vector"]["cardinality"]) == (1, 2)
    assert not any(c.net for c in plan.commits)  # a vector that only grows deletes, nothing more


def test_unchanged_merge_gives_nothing_where_cdf_is_on(tmp_path):
    on, off = str(tmp_path / "on"), str(tmp_path / "off")
    write_deltalake(on, pa.table({"id": [1, 2]}), configuration=CDF_ON)
    write_deltalake(off, pa.table({"id": [1, 2]}))
    assert plan_change_feed(on, append_unchanged_merge(on)).commits == ()
    netted = plan_change_feed(off, append_unchanged_merge(off))
    assert [(c.net, _kinds(netted)[c.version]) for c in netted.commits] == [
        (True, ["delete", "insert"])]


def test_range_end_past_latest_reads_to_latest_and_bad_starts_fail(shared_table):
    path = shared_table("delta-rs/cdf-table")
    assert plan_change_feed(path, 2, 99).end_version == 3
    with pytest.raises(VersionNotAvailableError, match="version 3 at the latest") as caught:
        plan_change_feed(path, 4)
    assert caught.value.version == 4 and path in str(caught.value)
    with pytest.raises(InvalidParameterError, match="end_version must be >= start_version"):
        plan_change_feed(path, 3, 2)


def test_commit_timestamps_are_file_times_made_increasing(shared_table):
    path = shared_table("delta-rs/cdf-table")
    for version, seconds in ((0, 1000), (1, 3000), (2, 2000), (3, 5000)):
        commit = os.path.join(path, "_delta_log", f"{version:020d}.json")
        os.utime(commit, (seconds, seconds))
    plan = plan_change_feed(path, 0)
    # never commitInfo.timestamp (1703265018828 at v0); v2's earlier file time is raised
    assert [c.timestamp_ms for c in plan.commits] == [1_000_000, 3_000_000, 3_000_001, 5_000_000]


def test_schema_is_the_latest_one_and_must_extend_the_range(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1]}), configuration=CDF_ON)
    write_deltalake(path, pa.table({"id": [2], "extra": ["x"]}), mode="append",
                    schema_mode="merge")
    assert [f["name"] for f in plan_change_feed(path, 0, 0).metadata.schema["fields"]] == [
        "id", "extra"]  # Delta reads a table without column mapping with its latest schema
    write_deltalake(path, pa.table({"id": [3]}), mode="overwrite", schema_mode="overwrite")
    assert DeltaTable(path).version() == 2
    for end in (1, 2):  # the drop at v2 is refused inside the range and after it alike
        with pytest.raises(SchemaChangeError, match="'extra' was dropped") as caught:
            plan_change_feed(path, 0, end)
        assert caught.value.version == 2
    assert [c.version for c in plan_change_feed(path, 2).commits] == [2]


def test_split_feed_never_cuts_a_commit(shared_table):
    feed = plan_change_feed(shared_table("delta-rs/cdf-table"), 0)  # 10, 6, 6 and 1 files
    batches = split_feed(feed, max_files=7)
    assert [(b.start_version, b.end_version, len(b)) for b in batches] == [
        (0, 0, 10), (1, 1, 6), (2, 3, 7)]
    assert [c.version for b in batches for c in b.commits] == [0, 1, 2, 3]
