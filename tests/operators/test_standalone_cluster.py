"""One sensor -> incremental load on a real Spark standalone cluster (master + worker)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

from .conftest import SPARK_CLASS, SPARK_CONF, append_rows, delta_rows, recorded

pytestmark = pytest.mark.slow

def test_sensor_then_incremental_load_on_a_standalone_cluster(standalone_master, monkeypatch,
                                                              run_dag, xcom_value, task_states,
                                                              tmp_path):
    conn = {"conn_type": "spark", "host": "spark://127.0.0.1", "port": standalone_master}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(conn))
    monkeypatch.setenv("PATH", f"{SPARK_CLASS.parent}{os.pathsep}{os.environ['PATH']}")
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3])
    with DAG("cluster_load", schedule=None) as dag:
        sensor = DeltaVersionSensor(task_id="sensor", table_uri=source, watermark_task_id="load",
                                    initial="earliest", poke_interval=1, timeout=60)
        load = DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, sensor_task_id="sensor",
            conn_id="spark_cluster", ship_package=True, executor_memory="512m",
            total_executor_cores=1,
            conf={**SPARK_CONF, "spark.pyspark.python": sys.executable},
        )
        sensor >> load

    run = run_dag(dag)

    assert task_states(run) == {"sensor": "success", "load": "success"}
    result = xcom_value(run, "load")
    assert (result["start_version"], result["end_version"], result["rows"]) == (0, 1, 4)
    assert xcom_value(run, "load", key="delta_watermark") == recorded(source, 1)
    assert delta_rows(target) == delta_rows(source)
