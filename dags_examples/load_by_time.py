"""Load by day: each daily run loads the versions committed on its day, exactly once.

``range_from="data_interval"`` makes the run's data interval ``[data_interval_start,
data_interval_end)`` the time range: every version whose commit time falls in it, by Delta's
rules (in-commit timestamps, else commit file times made increasing). With ``catchup=True`` a
scheduler that was down catches each missed day up on its own; ``airflow backfill create``
(Airflow 3) or ``airflow dags backfill`` (Airflow 2) reloads past days by date, and a day whose
versions the target already holds adds nothing.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from airflow.providers.common.compat.sdk import DAG

try:
    from airflow.sdk import CronDataIntervalTimetable  # Airflow 3
except ImportError:
    from airflow.timetables.interval import CronDataIntervalTimetable  # Airflow 2

from airflow_provider_delta.operators import DeltaIncrementalOperator

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "s3://lake/bronze/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "s3://lake/silver/orders_by_day")

# [START load_by_time_daily]
with DAG(
    "delta_load_by_day",
    # Each run's data interval is its day, midnight to midnight UTC. On Airflow 3 a bare
    # "@daily" or timedelta(days=1) schedule gives scheduled runs no data interval.
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=True,
) as dag:
    DeltaIncrementalOperator(
        task_id="load_day",
        table_uri=SOURCE,
        target=TARGET,
        range_from="data_interval",  # the versions committed in the run's day
        delta_conn_id="delta_default",  # object-store credentials for source and target
        conn_id="spark_default",
    )
# [END load_by_time_daily]
