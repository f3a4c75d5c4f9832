"""Kill the load at each step, then re-run: the target holds every row exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable

from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import SPARK_CONF, delta_rows, driver_env, four_commit_source, recorded, watermark

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


def _dag(conn_id, source, target, *, fault=None, transform="operators.transforms:add_batch_end"):
    with DAG("faulty_load", schedule=None) as dag:
        FaultyLoad(
            task_id="load", table_uri=source, target=target, conn_id=conn_id, conf=SPARK_CONF,
            watermark_store="variable", watermark_key="wm_faults", initial="earliest",
            max_files=1, transform=transform, env_vars=driver_env(), fault=fault,
        )
    return dag


def test_crash_at_each_step_then_rerun_loads_each_row_once(spark_local_conn, run_dag, xcom_value,
                                                          task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    expected = four_commit_source(source)
    assert sum(expected.values()) == 8

    run = run_dag(_dag(spark_local_conn, source, target, fault="before_submit"))
    assert task_states(run) == {"load": "failed"}
    assert not (tmp_path / "target").exists() and watermark("wm_faults") is None

    # Batch 2 (id 6) fails inside the Spark write: batches 0 and 1 are committed, 2 is not.
    run = run_dag(_dag(spark_local_conn, source, target,
                       transform="operators.transforms:fail_inside_write"))
    assert task_states(run) == {"load": "failed"}
    assert DeltaTable(target).transaction_version(_app_id(target)) == 1
    assert delta_rows(target) == Counter({r: n for r, n in expected.items() if r[2] < 2})
    assert watermark("wm_faults") is None

    # The re-run resumes at version 2; then the task dies before the watermark write.
    run = run_dag(_dag(spark_local_conn, source, target, fault="after_commit"))
    assert task_states(run) == {"load": "failed"}
    assert DeltaTable(target).transaction_version(_app_id(target)) == 3
    assert delta_rows(target) == expected
    assert watermark("wm_faults") is None

    # Everything is committed: no Spark job, and the watermark write itself fails.
    run = run_dag(_dag(spark_local_conn, source, target, fault="during_watermark_write"))
    assert task_states(run) == {"load": "failed"}
    assert watermark("wm_faults") is None

    run = run_dag(_dag(spark_local_conn, source, target))
    assert task_states(run) == {"load": "success"}
    assert xcom_value(run, "load")["batches"] == []
    assert watermark("wm_faults") == {source: recorded(source, 3)}
    assert delta_rows(target) == expected


def _app_id(target):
    from airflow_provider_delta.job.spec import stable_app_id
    from airflow_provider_delta.job.storage import to_uri

    return stable_app_id("faulty_load", "load", to_uri(target))
