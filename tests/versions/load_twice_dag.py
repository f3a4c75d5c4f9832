"""The DAG a DAG author writes on any supported Airflow: sensor, then incremental load.

Run as a script (``python load_twice_dag.py``) it runs once with ``dag.test()`` and prints the
run's task states as JSON on its last line. Tables, keys and modes come from the environment,
so the test can run it in a fresh process, from the installed wheel.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

try:
    from airflow.sdk import DAG  # Airflow 3
except ImportError:
    from airflow import DAG  # Airflow 2

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

SOURCE, TARGET = os.environ["DELTA_SOURCE"], os.environ["DELTA_TARGET"]
DEFERRABLE = os.environ.get("DELTA_DEFERRABLE") == "1"

with DAG(os.environ["DELTA_DAG_ID"], schedule=None, start_date=datetime(2024, 1, 1),
         catchup=False) as dag:
    wait = DeltaVersionSensor(
        task_id="wait", table_uri=SOURCE, watermark_store="variable", watermark_key="acceptance",
        initial=os.environ.get("DELTA_INITIAL", "snapshot"), deferrable=DEFERRABLE,
        poke_interval=1, timeout=300)
    load = DeltaIncrementalOperator(
        task_id="load", table_uri=SOURCE, sensor_task_id="wait", watermark_store="variable",
        watermark_key="acceptance", target=TARGET, sink="delta", conn_id="spark_local",
        conf=json.loads(os.environ["DELTA_SPARK_CONF"]))
    wait >> load

if __name__ == "__main__":
    run = dag.test()
    print(json.dumps({ti.task_id: str(ti.state) for ti in run.get_task_instances()}))
