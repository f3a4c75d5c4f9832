"""The operators' extra link to the Spark UI, resolved as Airflow's API server resolves it."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaTimeTravelOperator
from dags_examples.local_connect_server import LocalConnectServer, free_port
from operators.conftest import CONNECT_TOKEN, SPARK_CONF, append_rows


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


@pytest.mark.slow
def test_spark_connect_link_opens_the_task_sessions_page_in_the_servers_ui(
        monkeypatch, run_dag, task_states, tmp_path):
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    ui_url = f"http://127.0.0.1:{free_port()}"
    server = LocalConnectServer(tmp_path / "server.log", token=CONNECT_TOKEN, confs={
        "spark.ui.enabled": "true", "spark.ui.port": ui_url.rsplit(":", 1)[1],
        "spark.driver.extraJavaOptions": SPARK_CONF["spark.driver.extraJavaOptions"]})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_WITH_UI", json.dumps({
        "conn_type": "spark_connect", "host": "localhost", "port": server.port,
        "login": "etl_user", "password": CONNECT_TOKEN, "extra": {"ui_url": ui_url + "/"}}))
    with DAG("spark_connect_ui_link", schedule=None) as dag:
        DeltaTimeTravelOperator(task_id="load", table_uri=source, target=str(tmp_path / "copy"),
                                version=0, conn_id="spark_connect_with_ui")
    with server:
        run = run_dag(dag)
        assert task_states(run) == {"load": "success"}
        link = _link(run, "load", "Spark UI")
        session_id = re.fullmatch(
            rf"{re.escape(ui_url)}/connect/session/\?id=([0-9a-f-]+)&userId=etl_user",
            link).group(1)
        page = urllib.request.urlopen(link, timeout=60).read().decode()
    assert session_id in page and "Spark Connect" in page
