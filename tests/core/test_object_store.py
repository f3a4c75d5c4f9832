"""The core on S3 (a local moto server): start-after listing and storage_options end to end."""

from __future__ import annotations


import pytest

from airflow_provider_delta.core import (
    commit_timestamp, latest_version, plan_changes, plan_snapshot, version_at,
)
from airflow_provider_delta.errors import LogGapError, TableNotFoundError

@pytest.mark.parametrize("name", [
    "delta-kernel/basic-with-checkpoint", "delta-golden/v2-checkpoint-json",
    "delta-golden/multi-part-checkpoint", "delta-rs/simple_table",
    "delta-golden/dv-partitioned-with-checkpoint",
])
def test_remote_table_plans_like_its_local_copy(shared_table, upload, s3_options, name):
    local = shared_table(name)
    uri = upload(local, name)
    latest = latest_version(local)
    assert latest_version(uri, storage_options=s3_options) == latest
    assert latest_version(uri, since=0, storage_options=s3_options) == latest
    remote_snapshot = plan_snapshot(uri, storage_options=s3_options)
    local_snapshot = plan_snapshot(local)
    assert sorted(f.path.replace(uri, "") for f in remote_snapshot) == sorted(
        f.path.replace("file://" + local, "") for f in local_snapshot)
    assert all(f.path.startswith(uri + "/") for f in remote_snapshot)
    remote_changes = plan_changes(uri, 0, storage_options=s3_options, ignore_changes=True)
    local_changes = plan_changes(local, 0, ignore_changes=True)
    assert [(f.version, f.partition_values, f.deletion_vector) for f in remote_changes] == [
        (f.version, f.partition_values, f.deletion_vector) for f in local_changes]


def test_remote_commit_times_and_errors(shared_table, upload, s3_options):
    uri = upload(shared_table("delta-golden/snapshot-data1"), "times")
    first, second = (commit_timestamp(uri, v, storage_options=s3_options) for v in (0, 1))
    assert second > first
    from datetime import datetime, timezone

    assert version_at(uri, datetime.fromtimestamp(second / 1000, timezone.utc),
                      storage_options=s3_options) == 1
    hadoop_uri = uri.replace("s3://", "s3a://")  # Spark's scheme: listed as s3, paths kept
    assert latest_version(hadoop_uri, storage_options=s3_options) == 1
    assert all(f.path.startswith(hadoop_uri + "/")
               for f in plan_changes(hadoop_uri, 0, storage_options=s3_options))
    gap = upload(shared_table("delta-rs-errors/table_c"), "gap")
    with pytest.raises(LogGapError):
        latest_version(gap, storage_options=s3_options)
    with pytest.raises(TableNotFoundError):
        latest_version("s3://lake/absent", storage_options=s3_options)
