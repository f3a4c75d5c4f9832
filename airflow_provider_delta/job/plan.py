"""One plan path: a load's plan and every check of it.

The operator runs :func:`plan_load` before submitting, without Spark; the driver runs it again
inside the job, where the source or the target may have moved on since. A request that cannot
succeed is refused by this one piece of code, the first time before any JVM starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_delta.core import (
    ChangeFeedPlan, plan_change_feed, plan_changes, plan_snapshot, split_batches, split_feed,
)
from airflow_provider_delta.core.change_feed import FEED_COLUMNS
from airflow_provider_delta.core.model import Plan, TableMetadata
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.job.sinks import Sink, make_sink
from airflow_provider_delta.job.spec import JobSpec
from airflow_provider_delta.spark.reader import check_files_exist


@dataclass(frozen=True)
class LoadPlan:
    """What a job has to do: its sink, the first source version the sink does not hold yet,
    and the plan from there (None: the sink holds the whole request); ``whole_snapshot``: the
    plan is the request's snapshot, not the changes after what the sink holds."""

    sink: Sink
    resume: int
    plan: Plan | ChangeFeedPlan | None
    whole_snapshot: bool = False

    def batches(self, spec: JobSpec) -> list[Plan | ChangeFeedPlan]:
        """The plan cut into the batches the job commits one by one."""
        if self.plan is None:
            return []
        if self.whole_snapshot:
            return [self.plan]
        if isinstance(self.plan, ChangeFeedPlan):
            return split_feed(self.plan, max_files=spec.max_files, max_bytes=spec.max_bytes)
        return split_batches(self.plan, max_files=spec.max_files, max_bytes=spec.max_bytes)


def plan_load(spec: JobSpec, *, check_files: bool = False) -> LoadPlan:
    """Check the target, skip what the sink holds already (refusing overlaps), plan the rest
    and check the plan against the request. A snapshot whose first versions the target holds
    already (a retry after its commit, against a source that moved on) continues with the
    changes after them. ``check_files``: also check that the plan's data files exist (the
    driver's reader checks each batch's itself)."""
    sink = make_sink(spec.sink)
    sink.check_target(spec.table_uri)
    first, last = spec.covered_range()
    resume = sink.first_unwritten(first, last)
    if last is not None and resume > last:
        return LoadPlan(sink, resume, None)
    snapshot = spec.mode == "snapshot" and resume == first
    plan = _plan(spec, resume, snapshot)
    check_plan(spec, plan)
    if check_files:  # vacuumed files: fail here, not in Spark
        files = plan.as_plan() if isinstance(plan, ChangeFeedPlan) else plan
        check_files_exist(files, spec.storage_options)
    sink.check_not_source(spec.table_uri, plan.metadata.table_id)
    return LoadPlan(sink, resume, plan, snapshot)


def _plan(spec: JobSpec, resume: int, snapshot: bool) -> Plan | ChangeFeedPlan:
    options = {"storage_options": spec.storage_options}
    last = spec.covered_range()[1]
    if snapshot:
        return plan_snapshot(spec.table_uri, version=last, **options)
    if spec.change_feed:
        return plan_change_feed(spec.table_uri, resume, last, **options)
    return plan_changes(spec.table_uri, resume, last, ignore_deletes=spec.ignore_deletes,
                        ignore_changes=spec.ignore_changes,
                        skip_change_commits=spec.skip_change_commits, **options)


def check_plan(spec: JobSpec, plan: Plan | ChangeFeedPlan) -> None:
    """What the request asks of the source's columns, checked on the plan's schemas."""
    schemas = [(plan.end_version, plan.metadata),
               *sorted(getattr(plan, "metadata_changes", {}).items())]
    if spec.change_feed:
        for version, metadata in schemas:
            _refuse_feed_column_clash(spec, metadata, version)
    check_merge_keys(spec, plan.metadata)


def check_merge_keys(spec: JobSpec, metadata: TableMetadata) -> None:
    """Without a transform the rows are the source's: its columns must hold the keys."""
    if spec.transform or spec.sql or not spec.sink.merge_keys:
        return
    columns = _columns(metadata)
    missing = [k for k in spec.sink.merge_keys if k not in columns]
    if missing:
        raise InvalidParameterError(
            spec.context.get("task_id"), "merge_keys", list(spec.sink.merge_keys),
            f"names columns {missing} that the source does not have ({columns})",
            "fix merge_keys, or give a transform or sql that makes them", spec.table_uri)


def _refuse_feed_column_clash(spec: JobSpec, metadata: TableMetadata, version: int) -> None:
    """A source column named like a feed column would be ambiguous or overwritten."""
    clashing = [c for c in _columns(metadata) if c.lower() in FEED_COLUMNS]
    if clashing:
        raise InvalidParameterError(
            spec.context.get("task_id"), "change_feed", True,
            f"adds columns {list(FEED_COLUMNS)}, but the source has {clashing} at version "
            f"{version}", "rename those source columns, or load without change_feed",
            spec.table_uri)


def _columns(metadata: TableMetadata) -> list[str]:
    return [f["name"] for f in metadata.schema.get("fields", [])]
