"""One sensor -> incremental load on a real Spark standalone cluster (master + worker)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

from .conftest import SPARK_CONF, append_rows, delta_rows, recorded

pytestmark = pytest.mark.slow

SPARK_CLASS = Path(sys.executable).parent / "spark-class"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture
def standalone_master(tmp_path):
    """``spark://127.0.0.1:<port>`` with one 1-core worker; both stopped afterwards.

    The pyspark wheel has no ``sbin/start-master.sh``, so the daemons are started the way
    that script does it: ``spark-class`` with the Master and Worker main classes.
    """
    port, ui_port, worker_ui = _free_port(), _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "work")}
    logs = open(tmp_path / "daemons.log", "wb")  # noqa: SIM115 - closed below
    daemons = [subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui_port)], env=env, stdout=logs, stderr=logs)]
    daemons.append(subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
         "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui), master_url],
        env=env, stdout=logs, stderr=logs))
    try:
        deadline = time.monotonic() + 120
        while _alive_workers(ui_port) < 1:
            if time.monotonic() > deadline:
                log = (tmp_path / "daemons.log").read_text()[-2000:]
                pytest.fail(f"standalone cluster did not start: {log}")
            time.sleep(1)
        yield port
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            daemon.wait(timeout=30)
        logs.close()


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
