"""Two waits in front of a load: for data changes only, and for an interval to complete.

``delta_wait_for_data_changes`` runs every ten minutes but loads only when the source's rows
changed: an OPTIMIZE, a VACUUM or a property change alone keeps ``wait_for_data`` waiting
(and, with ``soft_fail``, skips the run). When data comes, the sensor's range starts after the
watermark and ends at the newest version, the maintenance commits included: the load reads
no file of theirs.

``delta_load_by_hour_when_complete`` loads each hour's commits once the hour is complete in
the table: a commit timed at or after its end exists, or ten minutes have passed since it
(``interval_grace``; a quiet hour is then taken as complete).

Set ``DELTA_EXAMPLE_SOURCE`` and ``DELTA_EXAMPLE_TARGET`` to try them on your own tables.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

try:
    from airflow.sdk import DeltaDataIntervalTimetable  # Airflow 3
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable  # Airflow 2

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaIntervalSensor, DeltaVersionSensor

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "/tmp/delta-example/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "/tmp/delta-example/orders_copy")

# [START wait_for_data_changes]
with DAG(
    dag_id="delta_wait_for_data_changes",
    schedule=timedelta(minutes=10),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # each run starts at the previous run's watermark
) as data_changes_dag:
    wait_for_data = DeltaVersionSensor(
        task_id="wait_for_data",
        table_uri=SOURCE,
        watermark_store="variable",
        watermark_key="orders_watermark",
        data_changes_only=True,  # OPTIMIZE, VACUUM, SET TBLPROPERTIES do not start a load
        deferrable=True,
        poke_interval=30,
        timeout=timedelta(minutes=9).total_seconds(),
        soft_fail=True,  # no data change before the next run: skip, not fail
    )
    wait_for_data >> DeltaIncrementalOperator(
        task_id="load_data_changes",
        table_uri=SOURCE,
        sensor_task_id="wait_for_data",
        watermark_store="variable",
        watermark_key="orders_watermark",
        target=TARGET,
        conn_id="spark_default",
    )
# [END wait_for_data_changes]

# [START wait_for_interval]
with DAG(
    dag_id="delta_load_by_hour_when_complete",
    # Each run's data interval is its hour; on Airflow 3 a bare timedelta(hours=1) schedule
    # gives scheduled runs no data interval.
    schedule=DeltaDataIntervalTimetable(timedelta(hours=1)),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
) as interval_dag:
    hour_complete = DeltaIntervalSensor(
        task_id="hour_complete",
        table_uri=SOURCE,  # interval_end defaults to "{{ data_interval_end }}"
        interval_grace=timedelta(minutes=10),
        deferrable=True,
        poke_interval=60,
        timeout=timedelta(hours=1).total_seconds(),
    )
    hour_complete >> DeltaIncrementalOperator(
        task_id="load_hour",
        table_uri=SOURCE,
        range_from="data_interval",
        target=f"{TARGET}_by_hour",
        conn_id="spark_default",
    )
# [END wait_for_interval]
