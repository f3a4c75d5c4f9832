"""An hourly DAG that loads each run's data interval (``range_from="data_interval"``), for
Airflow's own backfill command. Tables come from the environment."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from airflow.providers.common.compat.sdk import DAG

try:
    from airflow.sdk import DeltaDataIntervalTimetable  # Airflow 3
except ImportError:
    from airflow.timetables.interval import DeltaDataIntervalTimetable  # Airflow 2

from airflow_provider_delta.operators import DeltaIncrementalOperator

# Airflow 3 gives a bare timedelta schedule trigger runs without a data interval.
with DAG("hourly_by_time", schedule=DeltaDataIntervalTimetable(timedelta(hours=1)),
         start_date=datetime(2024, 5, 1, tzinfo=timezone.utc), catchup=False) as dag:
    DeltaIncrementalOperator(
        task_id="load", table_uri=os.environ["DELTA_SOURCE"], target=os.environ["DELTA_TARGET"],
        range_from="data_interval", sink="delta", conn_id="spark_local",
        conf=json.loads(os.environ["DELTA_SPARK_CONF"]))
