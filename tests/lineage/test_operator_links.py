"""The operators' extra link to the Spark UI, resolved as Airflow's API server resolves it."""

from __future__ import annotations

import re

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaTimeTravelOperator
from operators.conftest import SPARK_CONF, append_rows


def _link(dag_run, task_id: str, name: str) -> str | None:
    """The link the UI shows: the serialized task's link, read from what the run stored."""
    from airflow.models.serialized_dag import SerializedDagModel

    task = SerializedDagModel.get_dag(dag_run.dag_id).get_task(task_id)
    ti = next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id)
    return task.get_extra_links(ti, name)


@pytest.mark.slow
def test_spark_ui_link_resolves_to_the_ui_the_job_reported(spark_local_conn, run_dag,
                                                           task_states, xcom_value, tmp_path):
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    conf = {**SPARK_CONF, "spark.ui.enabled": "true", "spark.ui.port": "0"}  # any free port
    with DAG("spark_ui_link", schedule=None) as dag:
        DeltaTimeTravelOperator(task_id="load", table_uri=source, target=str(tmp_path / "copy"),
                                version=0, conn_id=spark_local_conn, conf=conf)
    run = run_dag(dag)
    assert task_states(run) == {"load": "success"}
    reported = xcom_value(run, "load")["spark_ui_url"]
    assert re.fullmatch(r"http://[^/:]+:\d+", reported), reported
    assert _link(run, "load", "Spark UI") == reported
