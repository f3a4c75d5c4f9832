"""What each Delta sink commit covers: overlaps refused, resumes and gaps loaded, one appId per
source and map index, targets of older versions resumed, and concurrent runs committing once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import SinkRangeOverlapError, SinkWriterOverlapError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaAppendSink
from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from airflow_provider_delta.job.spec import JobSpec
from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import append_rows, delta_rows, run_twice_at_once


def _operator(source, target, **kwargs):
    return DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                    conn_id="no_spark_needed", **kwargs)


def _spec(source, target, start, end, **kwargs) -> JobSpec:
    """The job spec the operator submits for versions ``start..end``."""
    sink = _operator(source, target).sink_spec()
    return JobSpec(table_uri=source, start=LoadStart("changes", start), sink=sink,
                   end_version=end, **kwargs)


def _added(source, first, last) -> Counter:
    """Rows that versions ``first..last`` of ``source`` added (appends only)."""
    return delta_rows(source, last) - (delta_rows(source, first - 1) if first else Counter())


def _source(path, commits) -> str:
    for number in range(commits):
        append_rows(str(path), [10 * number, 10 * number + 1])
    return str(path)


def test_backfill_inside_a_committed_range_is_refused_gaps_load(spark, tmp_path):
    source, target = _source(tmp_path / "source", 7), str(tmp_path / "target")
    run_job(spark, _spec(source, target, 0, 3))  # one commit covering 0..3

    with pytest.raises(SinkRangeOverlapError) as error:
        run_job(spark, _spec(source, target, 1, 2))
    message = str(error.value)
    assert "1..2 overlap" in message and "(0..3)" in message
    assert "start_version=4" in message and "new target" in message
    # The operator refuses it too, before any Spark job (no Spark connection exists here).
    with pytest.raises(SinkRangeOverlapError):
        _operator(source, target, start_version=2, end_version=5).execute({"run_id": "r"})
    assert DeltaTable(target).version() == 0

    run_job(spark, _spec(source, target, 5, 6))  # after a gap (version 4): loaded
    with pytest.raises(SinkRangeOverlapError, match=r"0\.\.3, 5\.\.6|5\.\.6"):
        run_job(spark, _spec(source, target, 4, 6))
    run_job(spark, _spec(source, target, 4, 4))
    again = run_job(spark, _spec(source, target, 0, 6))  # all committed: a retry writes nothing

    assert again.batches == ()
    assert delta_rows(target) == _added(source, 0, 6)
    history = sorted(DeltaTable(target).history(), key=lambda c: c["version"])
    assert [c["airflow_provider_delta.source_versions"] for c in history] == [
        "0..3", "5..6", "4..4"]


def test_two_sources_into_one_target_by_one_task_each_load_all_versions(spark, tmp_path):
    first, second = _source(tmp_path / "a", 3), _source(tmp_path / "b", 2)
    target = str(tmp_path / "target")
    run_job(spark, _spec(first, target, 0, 2))

    run_job(spark, _spec(second, target, 0, 1))  # the same DAG and task, another table_uri

    assert delta_rows(target) == delta_rows(first) + delta_rows(second)


def test_target_written_under_the_legacy_app_id_resumes_after_it(spark, tmp_path):
    source, target = _source(tmp_path / "source", 4), str(tmp_path / "target")
    legacy = _operator(source, target).sink_spec().legacy_app_id
    # What an older version committed: versions 0..2 under the (DAG, task, target) appId.
    write_deltalake(target, DeltaTable(source, version=2).to_pyarrow_dataset().to_table(),
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(legacy, 2)],
                        custom_metadata={"airflow_provider_delta.source_versions": "0..2"}))

    result = run_job(spark, _spec(source, target, 0, 3))

    assert [(b.start_version, b.end_version) for b in result.batches] == [(3, 3)]
    assert delta_rows(target) == delta_rows(source)


class _RacingSink(DeltaAppendSink):
    """The real sink; each run waits at the barrier right before its first commit, so both
    commit on a target read without the other's commit (or both create a new one)."""

    barrier: threading.Barrier
    waited = False

    def _commit(self, *args, **kwargs):
        if not self.waited:
            self.waited = True
            self.barrier.wait(timeout=120)
        return super()._commit(*args, **kwargs)


@pytest.mark.parametrize("first_run", [False, True], ids=["existing_target", "new_target"])
def test_two_concurrent_runs_commit_a_batch_once(spark, tmp_path, first_run):
    source, target = _source(tmp_path / "source", 3), str(tmp_path / "target")
    start = 0 if first_run else 1  # a first run creates the target: both runs try to
    if not first_run:
        run_job(spark, _spec(source, target, 0, 0))
    spec = _spec(source, target, start, 2)
    _RacingSink.barrier = threading.Barrier(2)
    frame = spark.read.parquet(*DeltaTable(source).file_uris()).where(f"id >= {10 * start}")
    results = run_twice_at_once(lambda: _RacingSink(spec.sink).write(frame, start, 2))

    assert sorted(r.rows for r in results) == [0, frame.count()]
    assert delta_rows(target) == delta_rows(source)
    commits = [c for c in DeltaTable(target).history()
               if c.get("airflow_provider_delta.source_versions") == f"{start}..2"]
    assert len(commits) == 1
    # The run that lost dropped its staged files; the winner's are the only ones of batch 2.
    staged = [folder for folder in (tmp_path / "target" / STAGING_FOLDER).glob(f"{2:020d}-*")
              if any(path.is_file() for path in folder.rglob("*"))]
    assert len(staged) == 1


def _other_task_spec(source, target, start, end) -> JobSpec:
    """The spec a second task (its own appId), e.g. a backfill DAG, submits into ``target``."""
    sink = DeltaIncrementalOperator(task_id="backfill", table_uri=source, target=target,
                                    conn_id="no_spark_needed").sink_spec()
    return JobSpec(table_uri=source, start=LoadStart("changes", start), sink=sink,
                   end_version=end)


def test_another_task_loading_versions_the_target_holds_is_refused(spark, tmp_path):
    source, target = _source(tmp_path / "source", 6), str(tmp_path / "target")
    run_job(spark, _spec(source, target, 0, 3))  # the incremental task

    with pytest.raises(SinkWriterOverlapError) as error:
        run_job(spark, _other_task_spec(source, target, 2, 4))
    message = str(error.value)
    assert "2..4" in message and "0..3" in message and source in message
    assert "start_version=4" in message and "allow_overlapping_writers" in message
    # The operator refuses it before any Spark job (no Spark connection exists here).
    backfill = DeltaIncrementalOperator(task_id="backfill", table_uri=source, target=target,
                                        conn_id="no_spark_needed", start_version=1, end_version=1)
    with pytest.raises(SinkWriterOverlapError):
        backfill.execute({"run_id": "r"})
    assert DeltaTable(target).version() == 0

    run_job(spark, _other_task_spec(source, target, 4, 4))  # beside it: loaded
    with pytest.raises(SinkWriterOverlapError, match="4..4"):  # and the first task now stops
        run_job(spark, _spec(source, target, 4, 5))
    run_job(spark, _spec(source, target, 5, 5))

    assert delta_rows(target) == _added(source, 0, 5)


def test_overlapping_writers_are_allowed_when_asked(spark, tmp_path):
    source, target = _source(tmp_path / "source", 2), str(tmp_path / "target")
    run_job(spark, _spec(source, target, 0, 1, sql="select * from changes where id % 2 = 0"))
    sink = DeltaIncrementalOperator(task_id="odd_ids", table_uri=source, target=target,
                                    conn_id="no_spark_needed",
                                    allow_overlapping_writers=True).sink_spec()

    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=sink,
                           end_version=1, sql="select * from changes where id % 2 = 1"))

    assert delta_rows(target) == delta_rows(source)


def test_format_sink_loads_the_gap_a_backfill_left_instead_of_skipping_it(spark, tmp_path):
    """A Parquet target: the watermark is at 1, a backfill wrote 4..5 ahead of it. The next load
    from the watermark (2..5) must not take 5 for the end of everything loaded."""
    source, target = _source(tmp_path / "source", 6), str(tmp_path / "target")
    parquet = {"sink": "parquet"}
    sink = _operator(source, target, **parquet).sink_spec()
    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0), sink=sink,
                           end_version=1))
    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 4), sink=sink,
                           end_version=5))

    with pytest.raises(SinkRangeOverlapError, match="4..5"):
        run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 2), sink=sink,
                               end_version=5))
    run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 2), sink=sink,
                           end_version=3))

    written = spark.read.parquet(f"{target}/source_versions=*").toArrow()
    assert Counter(zip(*[written[c].to_pylist() for c in ("id", "name")])) == delta_rows(source)
