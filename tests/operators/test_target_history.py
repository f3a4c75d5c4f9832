"""Long-lived Delta targets: what the sinks record lives in the target's snapshot (txn records
that checkpoints carry), so the rules answer the same after log cleanup, targets of older
versions are carried forward, a load's requests do not grow with the target's history, and a
commit that loses a race with another process's append is rebuilt once, nothing lost or doubled.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from airflow_provider_delta.core.model import LoadStart
from airflow_provider_delta.errors import SinkRangeOverlapError, SinkWriterOverlapError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaAppendSink, DeltaMergeSink
from airflow_provider_delta.job.sinks.target_log import (
    APP_ID_KEY, REMEMBERED_STARTS, SOURCE_KEY, SOURCE_VERSIONS_KEY, TargetLog,
)
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from airflow_provider_delta.operators import DeltaIncrementalOperator

from tests.moto_s3 import counted_requests, put_tree

from .conftest import append_rows, delta_rows
from .long_history import grow_with_foreign_appends

CLEANED = {"delta.logRetentionDuration": "interval 0 seconds", "delta.checkpointInterval": "1000"}
ROWS = pa.table({"id": pa.array([-1], pa.int64()), "name": ["other"]})


def _spec(source: str, target: str, task_id: str = "load", **kwargs) -> SinkSpec:
    return DeltaIncrementalOperator(task_id=task_id, table_uri=source, target=target,
                                    conn_id="no_spark_needed", **kwargs).sink_spec()


def _commit(spec: SinkSpec, start: int, end: int) -> None:
    """What a sink's commit of source versions ``start..end`` records (no rows)."""
    target = TargetLog.open(spec)
    target.table.create_write_transaction([], "append", ROWS.schema,
                                          commit_properties=target.commit_properties(start, end))


def _cleaned_target(path: Path) -> str:
    write_deltalake(str(path), ROWS, configuration=CLEANED)
    return str(path)


def _checkpoint_and_clean(target: str) -> None:
    """Another writer's append, a checkpoint on it, and log cleanup: no commit of this provider
    is left in the history."""
    write_deltalake(target, ROWS, mode="append")
    table = DeltaTable(target)
    table.create_checkpoint()
    table.cleanup_metadata()
    assert not [c for c in DeltaTable(target).history() if SOURCE_VERSIONS_KEY in c]


def test_rules_answer_the_same_after_log_cleanup(tmp_path):
    source, target = str(tmp_path / "source"), _cleaned_target(tmp_path / "target")
    task, backfill = _spec(source, target), _spec(source, target, "backfill")
    for start, end in [(0, 3), (4, 4), (7, 8)]:  # a hole at 5..6
        _commit(task, start, end)

    _checkpoint_and_clean(target)

    log = TargetLog.open(task)
    assert log.first_unwritten(4, 6) == 5  # resumes after a commit, in sequence
    assert log.first_unwritten(5, 6) == 5  # the hole loads
    with pytest.raises(SinkRangeOverlapError, match=r"\(0\.\.3\)"):
        log.first_unwritten(1, 2)  # inside a commit: refused
    assert log.held_through(None) == 4 and log.held_through(7) == 8
    with pytest.raises(SinkWriterOverlapError, match=r"3\.\.5 .*0\.\.4 by appId"):
        TargetLog.open(backfill).first_unwritten(3, 5)
    assert TargetLog.open(backfill).first_unwritten(5, 6) == 5


def test_a_run_longer_than_its_remembered_starts(tmp_path):
    """The newest commits' starts are exact; further back every version counts as a start, so
    a retry from an old watermark resumes instead of being refused (nothing is written twice)."""
    source, target = str(tmp_path / "source"), _cleaned_target(tmp_path / "target")
    task = _spec(source, target)
    commits = REMEMBERED_STARTS + 4
    for number in range(commits):
        _commit(task, 2 * number, 2 * number + 1)  # two source versions a commit
    last = 2 * commits - 1
    log = TargetLog.open(task)

    assert log.first_unwritten(last - 1, last + 5) == last + 1  # the newest commit's start
    with pytest.raises(SinkRangeOverlapError):
        log.first_unwritten(last, last + 5)  # inside the newest commit
    assert log.first_unwritten(3, last + 5) == last + 1  # forgotten boundaries: resumes
    assert log.held_through(0) == last


def _old_layout_commit(target: str, rows: pa.Table, app_id: str, source: str, first: int,
                       last: int) -> None:
    """What versions of this provider before the snapshot records committed."""
    write_deltalake(target, rows, mode="append", configuration=CLEANED,
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id, last)],
                        custom_metadata={SOURCE_VERSIONS_KEY: f"{first}..{last}",
                                         APP_ID_KEY: app_id, SOURCE_KEY: source}))


def test_target_of_older_versions_resumes_once_and_is_carried_forward(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for number in range(5):
        append_rows(source, [10 * number, 10 * number + 1])
    spec = _spec(source, target)
    rows = DeltaTable(source, version=1).to_pyarrow_dataset().to_table()
    _old_layout_commit(target, rows.slice(0, 2), spec.app_id, spec.source, 0, 0)
    _old_layout_commit(target, rows.slice(2, 2), spec.app_id, spec.source, 1, 1)

    result = run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=spec,
                                    end_version=3))

    assert [(b.start_version, b.end_version) for b in result.batches] == [(2, 3)]
    assert delta_rows(target) == delta_rows(source, 3)
    _checkpoint_and_clean(target)  # the old commits' ranges now live only in the records
    with pytest.raises(SinkWriterOverlapError, match=r"0\.\.3 by appId"):
        TargetLog.open(_spec(source, target, "backfill")).first_unwritten(1, 1)
    assert TargetLog.open(spec).first_unwritten(1, 4) == 4


def test_overlapping_backfill_after_log_cleanup_is_refused(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for number in range(4):
        append_rows(source, [10 * number])
    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0),
                           sink=_spec(source, target), end_version=2))
    DeltaTable(target).alter.set_table_properties(CLEANED)
    _checkpoint_and_clean(target)

    backfill = JobSpec(table_uri=source, start=LoadStart("changes", 2),
                       sink=_spec(source, target, "backfill"), end_version=3)
    with pytest.raises(SinkWriterOverlapError, match=r"0\.\.2 by appId"):
        run_job(spark, backfill)
    assert delta_rows(target) == delta_rows(source, 2) + Counter({(-1, "other"): 1})


_FOREIGN_APPEND = """
import sys
import pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array([-7], pa.int64()), "name": ["foreign"]}),
                mode="append")
"""


def _foreign_append(target: str) -> None:
    """An append by another process (a plain deltalake writer)."""
    subprocess.run([sys.executable, "-c", _FOREIGN_APPEND, target], check=True, timeout=120)


def _race_once(sink) -> None:
    """Another process appends to the sink's target, the first time the sink commits."""
    if not getattr(sink, "raced", False):
        sink.raced = True
        _foreign_append(sink.uri)


class _AppendRacedOnce(DeltaAppendSink):
    """The real sink; another process appends right after its check, before its commit."""

    def _commit(self, *args, **kwargs):
        _race_once(self)
        return super()._commit(*args, **kwargs)


class _MergeRacedOnce(DeltaMergeSink):
    def _merge(self, *args, **kwargs):
        _race_once(self)
        return super()._merge(*args, **kwargs)


def test_append_racing_another_process_commits_once(spark, tmp_path, caplog):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for number in range(2):
        append_rows(source, [10 * number, 10 * number + 1])
    spec = _spec(source, target)
    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=spec,
                           end_version=0))
    frame = spark.read.parquet(*DeltaTable(source).file_uris()).where("id >= 10")

    written = _AppendRacedOnce(spec).write(frame, 1, 1)

    assert "concurrent commit, checking the log again" in caplog.text
    assert written.rows == 2 and written.sink_version == 2  # after the other process's v1
    foreign = Counter({(-7, "foreign"): 1})
    assert delta_rows(target) == delta_rows(source) + foreign
    log = TargetLog.open(spec)
    assert log.first_unwritten(0, 1) == 2 and log.held_through(None) == 1


def test_merge_racing_another_process_merges_once(tmp_path, caplog):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(source, pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}),
                    mode="append")
    sink = SinkSpec(kind="delta-merge", path=target, app_id="merge-app", merge_keys=("id",),
                    source=source)
    run_job(None, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=sink,
                          end_version=0, change_feed=True))
    feed = pa.table({"id": pa.array([3], pa.int64()), "name": ["c"],
                     "_change_type": ["insert"], "_commit_version": pa.array([1], pa.int64())})

    written = _MergeRacedOnce(sink).write_changes(feed, 1, 1)

    assert "concurrent commit, checking the log again" in caplog.text
    assert written.sink_version == 2
    assert delta_rows(target) == delta_rows(source) + Counter({(-7, "foreign"): 1})
    assert TargetLog.open(sink).first_unwritten(0, 5) == 2


def _load_counting_requests(s3_options, tmp_path: Path, commits: int) -> Counter:
    """A merge load's requests to an S3 target of ``commits`` versions (one of it the
    provider's first load, the rest other writers' appends; a checkpoint at the newest)."""
    source = str(tmp_path / f"source-{commits}")
    write_deltalake(source, pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    local = tmp_path / f"target-{commits}"
    target = f"s3://lake/history-{commits}"
    sink = SinkSpec(kind="delta-merge", path=target, app_id="merge-app", merge_keys=("id",),
                    source=source)
    # The provider's first load, made locally with the S3 target's appId, then other writers.
    local_sink = SinkSpec(kind="delta-merge", path=str(local), app_id="merge-app",
                          merge_keys=("id",), source=source)
    run_job(None, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=local_sink,
                          end_version=0, change_feed=True))
    grow_with_foreign_appends(local, commits - 1, ROWS, checkpoints="newest")
    put_tree(local, f"history-{commits}")
    write_deltalake(source, pa.table({"id": pa.array([2], pa.int64()), "name": ["b"]}),
                    mode="append")

    with counted_requests(s3_options) as (counted, requests):
        spec = JobSpec(table_uri=source, start=LoadStart("changes", 0), end_version=1,
                       change_feed=True, storage_options=counted,
                       sink=replace(sink, storage_options=counted))
        result = run_job(None, spec)
    assert [(b.start_version, b.end_version) for b in result.batches] == [(1, 1)]
    assert DeltaTable(target, storage_options=s3_options).version() == commits
    return requests


def test_a_loads_requests_to_an_s3_target_do_not_grow_with_its_history(s3_options, tmp_path):
    small = _load_counting_requests(s3_options, tmp_path, 100)
    large = _load_counting_requests(s3_options, tmp_path, 5000)
    assert small == large, (small, large)
