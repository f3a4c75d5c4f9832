"""Kill the load at each step, then re-run: the target holds every row exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable

from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import (
    SPARK_CONF,
    append_rows,
    delta_rows,
    forget_watermark,
    four_commit_source,
    recorded,
    watermark,
    with_sink,
)

pytestmark = pytest.mark.slow


class Crash(RuntimeError):
    """Stands for the worker dying at that point (nothing after it runs)."""


class FaultyLoad(DeltaIncrementalOperator):
    """The real operator, with a crash injected at one step."""

    def __init__(self, *, fault: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fault = fault

    def submit(self, context, spec):
        if self.fault == "before_submit":
            raise Crash("killed before spark-submit")
        return super().submit(context, spec)

    def advance_watermark(self, context, version):
        if self.fault == "after_commit":
            raise Crash("killed after the sink commit, before the watermark write")
        if self.fault == "during_watermark_write":
            store = self.store
            store.write = _failing_write  # the Variable backend fails mid-write
        super().advance_watermark(context, version)


def _failing_write(context, version, table_id=None):
    raise Crash("the watermark store failed while writing")


def _dag(transport, source, target, *, fault=None, transform="operators.transforms:add_batch_end",
         initial="earliest", watermark_key="wm_faults", sink="delta"):
    with DAG("faulty_load", schedule=None) as dag:
        FaultyLoad(
            task_id="load", table_uri=source, target=target, **with_sink(transport, sink),
            watermark_store="variable", watermark_key=watermark_key, initial=initial,
            max_files=1, transform=transform, fault=fault,
        )
    return dag


def test_crash_at_each_step_then_rerun_loads_each_row_once(spark_transport, delta_sink, run_dag,
                                                          xcom_value, task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    expected = four_commit_source(source)
    assert sum(expected.values()) == 8
    forget_watermark("wm_faults")
    load = {"transport": spark_transport, "source": source, "target": target,
            "sink": delta_sink}

    run = run_dag(_dag(**load, fault="before_submit"))
    assert task_states(run) == {"load": "failed"}
    assert not (tmp_path / "target").exists() and watermark("wm_faults") is None

    # Batch 2 (id 6) fails inside the Spark write: batches 0 and 1 are committed, 2 is not.
    run = run_dag(_dag(**load,
                       transform="operators.transforms:fail_inside_write"))
    assert task_states(run) == {"load": "failed"}
    assert DeltaTable(target).transaction_version(_app_id(source, target)) == 1
    assert delta_rows(target) == Counter({r: n for r, n in expected.items() if r[2] < 2})
    assert watermark("wm_faults") is None

    # The re-run resumes at version 2; then the task dies before the watermark write.
    run = run_dag(_dag(**load, fault="after_commit"))
    assert task_states(run) == {"load": "failed"}
    assert DeltaTable(target).transaction_version(_app_id(source, target)) == 3
    assert delta_rows(target) == expected
    assert watermark("wm_faults") is None

    # Everything is committed: no Spark job, and the watermark write itself fails.
    run = run_dag(_dag(**load, fault="during_watermark_write"))
    assert task_states(run) == {"load": "failed"}
    assert watermark("wm_faults") is None

    run = run_dag(_dag(**load))
    assert task_states(run) == {"load": "success"}
    assert xcom_value(run, "load")["batches"] == []
    assert watermark("wm_faults") == {source: recorded(source, 3)}
    assert delta_rows(target) == expected


def test_first_snapshot_committed_then_crash_retry_loads_only_the_changes_after_it(
    spark_transport, run_dag, xcom_value, task_states, tmp_path
):
    """initial="snapshot" commits the snapshot, dies before the watermark; the source moves on
    by two commits: the retry continues after the sink's txn instead of a second snapshot."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    forget_watermark("wm_first_crash")
    crashed = run_dag(_dag(spark_transport, source, target, fault="after_commit",
                           initial="snapshot", watermark_key="wm_first_crash", transform=None))
    assert task_states(crashed) == {"load": "failed"}
    assert delta_rows(target) == delta_rows(source) and watermark("wm_first_crash") is None

    append_rows(source, [5, 6])
    append_rows(source, [7])
    retry = run_dag(_dag(spark_transport, source, target, initial="snapshot",
                         watermark_key="wm_first_crash", transform=None))
    assert task_states(retry) == {"load": "success"}
    result = xcom_value(retry, "load")
    assert (result["mode"], result["start_version"], result["end_version"]) == ("changes", 2, 3)
    assert delta_rows(target) == delta_rows(source)
    assert watermark("wm_first_crash") == {source: recorded(source, 3)}


def test_lost_watermark_with_initial_latest_continues_after_the_sinks_txn(
    spark_local_conn, run_dag, xcom_value, task_states, tmp_path
):
    """initial="latest" started the pipeline, a later run committed versions 1..1; then the
    watermark is lost (its Variable deleted, its runs cleared). The next run must load what
    came since the sink's txn, not start after the latest version again."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1])
    forget_watermark("wm_lost")
    dag = _dag({"conn_id": spark_local_conn, "conf": SPARK_CONF}, source, target,
               initial="latest", watermark_key="wm_lost", transform=None)
    assert xcom_value(run_dag(dag), "load")["batches"] == []  # records version 0
    append_rows(source, [2, 3])
    assert xcom_value(run_dag(dag), "load")["end_version"] == 1

    forget_watermark("wm_lost")
    append_rows(source, [4])
    run = run_dag(dag)

    assert task_states(run) == {"load": "success"}
    result = xcom_value(run, "load")
    assert (result["mode"], result["start_version"], result["end_version"]) == ("changes", 2, 2)
    assert delta_rows(target) == delta_rows(source) - delta_rows(source, 0)
    assert watermark("wm_lost") == {source: recorded(source, 2)}


def test_first_watermark_run_after_a_backfill_of_the_same_task_is_refused_not_skipped(
    spark_local_conn, run_dag, task_states, tmp_path
):
    """The task backfilled versions 2..3 (an explicit range: no watermark). Its first run from
    the watermark (none yet: initial="snapshot") must not take the backfill's txn for the
    snapshot's: versions 0..1 would never be loaded. It is refused instead."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0], [1], [2], [3]):
        append_rows(source, ids)
    forget_watermark("wm_backfilled")

    def load(**explicit):
        with DAG("backfilled_load", schedule=None) as dag:
            DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                     watermark_store="variable", watermark_key="wm_backfilled",
                                     conn_id=spark_local_conn, conf=SPARK_CONF, **explicit)
        return dag

    assert task_states(run_dag(load(start_version=2, end_version=3))) == {"load": "success"}
    backfilled = delta_rows(target)
    assert backfilled == delta_rows(source) - delta_rows(source, 1)

    run = run_dag(load())

    assert task_states(run) == {"load": "failed"}
    assert delta_rows(target) == backfilled and watermark("wm_backfilled") is None


def test_loads_from_the_watermark_run_one_at_a_time_by_default(register_dag, tmp_path):
    """Two runs of one DAG at once (max_active_runs > 1, a manual run beside a scheduled one)
    would read the same watermark and load the same range; Variables have no compare-and-set.
    The scheduler, which reads the serialized DAG, starts such a load only when no other try
    of it runs."""
    from airflow.models.serialized_dag import SerializedDagModel

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    with DAG("one_load_at_a_time", schedule=None, max_active_runs=3) as dag:
        for task_id, extra in (("load", {}), ("backfill", {"start_version": 0}),
                               ("own_limit", {"max_active_tis_per_dag": 3})):
            DeltaIncrementalOperator(task_id=task_id, table_uri=source, target=f"{target}_{task_id}",
                                     conn_id="no_spark_needed", **extra)
    register_dag(dag)

    stored = SerializedDagModel.get_dag("one_load_at_a_time")

    assert {task.task_id: task.max_active_tis_per_dag for task in stored.tasks} == {
        "load": 1, "backfill": None, "own_limit": 3}


def _app_id(source, target):
    from airflow_provider_delta.storage import normalised_location
    from airflow_provider_delta.job.spec import stable_app_id

    return stable_app_id("faulty_load", "load", normalised_location(target),
                         normalised_location(source))
