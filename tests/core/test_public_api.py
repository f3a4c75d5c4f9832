"""The public core API on shared reference tables."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pytest

from airflow_provider_delta.core import (
    commit_timestamp, latest_version, plan_changes, plan_snapshot, split_batches, version_at,
)
from airflow_provider_delta.errors import DataChangeError, LogGapError
from tests.conftest import TIME_TRAVEL_COMMIT_MS


def test_latest_version_with_and_without_hint(shared_table):
    path = shared_table("delta-kernel/basic-with-checkpoint")
    assert latest_version(path) == 14
    assert latest_version(path, since=3) == 14
    assert latest_version("file://" + path, since=14) == 14
    assert latest_version(path, since=40) == 14  # a hint past the end: the log decides


def test_plan_changes_append_only_range(shared_table):
    path = shared_table("delta-kernel/kernel-pagination-all-jsons")
    plan = plan_changes(path, 1, 2)
    assert [f.version for f in plan] == [1] * 5 + [2] * 5
    assert all(f.path.startswith("file://" + path + "/") for f in plan)
    assert all(os.path.exists(f.path[len("file://"):]) for f in plan)
    assert plan.metadata.schema["fields"][0]["name"] == "id"


def test_delete_needs_an_option(shared_table):
    path = shared_table("delta-golden/basic-with-inserts-deletes-checkpoint")
    with pytest.raises(DataChangeError) as caught:
        plan_changes(path, 4, 6)
    assert caught.value.version == 5
    assert len(plan_changes(path, 4, 13, skip_change_commits=True)) == 4  # v4, v10..v12
    assert {f.version for f in plan_changes(path, 4, 13, ignore_changes=True)} >= {4, 10}


def test_split_batches_covers_range(shared_table):
    path = shared_table("delta-kernel/kernel-pagination-all-jsons")
    batches = split_batches(plan_changes(path, 0), max_files=7)
    assert [(b.start_version, b.end_version, len(b)) for b in batches] == [
        (0, 0, 5), (1, 1, 5), (2, 2, 5)]


def test_typed_partition_values(shared_table):
    plan = plan_snapshot(shared_table("delta-golden/basic-decimal-table"))
    assert Decimal("-2342342.23423") in {f.partition_values["part"] for f in plan}


def test_gap_raises(shared_table):
    with pytest.raises(LogGapError):
        plan_changes(shared_table("delta-golden/versions-not-contiguous"), 0, 2)


def test_version_at_uses_file_times(time_travel_table):
    path = time_travel_table
    start_ms = TIME_TRAVEL_COMMIT_MS[0]
    assert commit_timestamp(path, 1) == TIME_TRAVEL_COMMIT_MS[1]
    start = dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
    assert version_at(path, start + dt.timedelta(minutes=25)) == 1
    assert version_at(path, (start + dt.timedelta(minutes=40)).isoformat()) == 2
