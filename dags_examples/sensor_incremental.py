"""Wait for new versions of a Delta table, then load exactly those versions with Spark.

``wait_for_versions`` (deferrable: it waits in the triggerer, not in a worker slot) reads the
watermark from the Airflow Variable ``orders_watermark`` and succeeds when the table has
versions after it, returning ``{"table_uri", "start_version", "end_version",
"latest_commit_timestamp"}``. ``load_new_versions`` loads that range and only then moves the
watermark to ``end_version``, in the same Variable. A run that fails leaves the watermark
where it was, so the next run loads the same versions again, exactly once in the target.

Set ``DELTA_EXAMPLE_SOURCE`` and ``DELTA_EXAMPLE_TARGET`` to try it on your own tables; for an
object store add a ``delta`` connection and pass ``delta_conn_id``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_delta.operators.delta_load import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "/tmp/delta-example/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "/tmp/delta-example/orders_copy")
WATERMARK = "orders_watermark"

# [START howto_sensor_delta_version]
with DAG(
    dag_id="delta_sensor_incremental",
    schedule=timedelta(minutes=10),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # one load at a time: each run starts at the previous run's watermark
    tags=["delta", "example"],
) as dag:
    wait_for_versions = DeltaVersionSensor(
        task_id="wait_for_versions",
        table_uri=SOURCE,
        watermark_store="variable",
        watermark_key=WATERMARK,
        initial="earliest",
        deferrable=True,
        poke_interval=30,
        timeout=timedelta(minutes=9).total_seconds(),
        soft_fail=True,  # nothing new before the next run: skip, not fail
    )
    load_new_versions = DeltaIncrementalOperator(
        task_id="load_new_versions",
        table_uri=SOURCE,
        sensor_task_id="wait_for_versions",
        watermark_store="variable",
        watermark_key=WATERMARK,
        target=TARGET,
        conn_id="spark_default",
    )
    wait_for_versions >> load_new_versions
# [END howto_sensor_delta_version]
