"""The pure log core: reads a Delta table's ``_delta_log`` and plans reads.

It imports neither Airflow nor Spark. Public API: :func:`latest_version`,
:func:`plan_changes`, :func:`split_batches`, :func:`plan_snapshot`, :func:`version_at`,
:func:`commit_timestamp`, :func:`versions_between`, :func:`newest_commit_time`,
:func:`plan_change_feed`, and the data model in
:mod:`airflow_provider_delta.core.model` (:class:`LoadStart` included).
"""

from __future__ import annotations

from airflow_provider_delta.core.change_feed import (
    ChangeFeedPlan, CommitChanges, plan_change_feed, split_feed,
)
from airflow_provider_delta.core.changes import plan_changes, split_batches
from airflow_provider_delta.core.model import (
    DeletionVectorDescriptor, LoadStart, Plan, PlannedFile, TableMetadata,
)
from airflow_provider_delta.core.snapshot import plan_snapshot
from airflow_provider_delta.core.commit_times import (
    commit_timestamp, newest_commit_time, version_at, versions_between,
)
from airflow_provider_delta.core.versions import latest_version

__all__ = [
    "ChangeFeedPlan", "CommitChanges", "DeletionVectorDescriptor", "LoadStart", "Plan",
    "PlannedFile", "TableMetadata", "commit_timestamp", "latest_version", "plan_change_feed",
    "newest_commit_time", "plan_changes", "plan_snapshot", "split_batches", "split_feed",
    "version_at", "versions_between",
]
