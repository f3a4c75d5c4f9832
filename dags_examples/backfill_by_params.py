"""Backfill: load an explicit version range given as DAG params, without moving the watermark.

Trigger it with ``{"start_version": 10, "end_version": 20}``. The range is validated before
Spark starts (``start_version <= end_version <= latest``, no log gaps). Re-running the same
range writes nothing twice: the target's ``txn`` for this DAG and task records what it holds.
Set ``move_watermark=True`` to make the backfill's end the new watermark.
"""

from __future__ import annotations

import os

from airflow.providers.common.compat.sdk import DAG, Param

from airflow_provider_delta.operators import DeltaIncrementalOperator

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "s3://lake/bronze/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "s3://lake/silver/orders_backfill")

# [START howto_operator_delta_backfill]
with DAG(
    "delta_backfill_by_params",
    schedule=None,
    params={
        "start_version": Param(0, type="integer", minimum=0),
        "end_version": Param(0, type="integer", minimum=0),
    },
) as dag:
    DeltaIncrementalOperator(
        task_id="backfill",
        table_uri=SOURCE,
        start_version="{{ params.start_version }}",
        end_version="{{ params.end_version }}",
        target=TARGET,
        delta_conn_id="delta_default",  # object-store credentials for source and target
        conn_id="spark_default",
        max_files=500,  # large ranges run as batches of <= 500 files, each committed on its own
        sql="select * from changes where amount > 0",
    )
# [END howto_operator_delta_backfill]
