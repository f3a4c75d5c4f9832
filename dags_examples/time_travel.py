"""Time travel: copy the snapshot of a Delta table at a version or at a point in time.

Give exactly one of ``version`` and ``timestamp`` (templated). A timestamp reads the latest
commit at or before it. A version outside the log's window or vacuumed files fail before any
Spark job is submitted.
"""

from __future__ import annotations

import os

from airflow.providers.common.compat.sdk import DAG, Param

from airflow_provider_delta.operators import DeltaTimeTravelOperator

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "s3://lake/bronze/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_EXPORT", "s3://lake/exports/orders")

# [START howto_operator_delta_time_travel]
with DAG(
    "delta_time_travel",
    schedule=None,
    params={"version": Param(0, type="integer", minimum=0)},
) as dag:
    at_version = DeltaTimeTravelOperator(
        task_id="snapshot_at_version",
        table_uri=SOURCE,
        version="{{ params.version }}",
        target=f"{TARGET}/by_version",
        sink="parquet",  # any Spark format; written to <target>/source_versions=<v>-<v>
        delta_conn_id="delta_default",
    )
    end_of_day = DeltaTimeTravelOperator(
        task_id="snapshot_at_end_of_day",
        table_uri=SOURCE,
        timestamp="{{ data_interval_end.isoformat() }}",
        target=f"{TARGET}/end_of_day",  # a Delta table; the snapshot is committed once
        delta_conn_id="delta_default",
    )
# [END howto_operator_delta_time_travel]
