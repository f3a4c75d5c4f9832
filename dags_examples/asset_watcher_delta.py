"""Event-driven: run a DAG whenever a Delta table gets new versions (AssetWatcher).

The triggerer runs ``DeltaVersionTrigger`` for the asset: it lists ``_delta_log`` every
``poll_interval`` seconds and creates one asset event per new version range, with payload
``{"status": "success", "table_uri", "start_version", "end_version",
"latest_commit_timestamp"}``. Its own watermark (the last announced version) lives in the
asset state store (Airflow >= 3.3), so a restarted triggerer does not announce old versions.

Delivery is at least once: a triggerer that dies between announcing a range and storing its
watermark announces the range again. The consumer below is idempotent by construction: it
ignores the payload's range and loads from its own watermark (``watermark + 1 .. latest``),
so a repeated event finds nothing new. A consumer that acts on the payload instead should
drop events whose ``end_version`` it has already seen.

Needs Airflow >= 3.0 (``AssetWatcher``) and, for the trigger's own watermark, >= 3.3.2; on
Airflow 2 this file defines no DAG: poll with ``DeltaVersionSensor`` as
``sensor_incremental.py`` does.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_delta.operators.delta_load import DeltaIncrementalOperator
from airflow_provider_delta.triggers import DeltaVersionTrigger

try:
    from airflow.sdk import Asset, AssetWatcher  # Airflow >= 3.0
except ImportError:  # Airflow 2
    AssetWatcher = None

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "/tmp/delta-example/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "/tmp/delta-example/orders_copy")


# [START howto_trigger_delta_version_asset_watcher]
def orders_dag() -> DAG:
    orders = Asset(
        name="delta_orders",
        uri=f"file://{SOURCE}",
        watchers=[
            AssetWatcher(
                name="delta_orders_versions",
                trigger=DeltaVersionTrigger(table_uri=SOURCE, initial="latest", poll_interval=30),
            )
        ],
    )

    with DAG(
        dag_id="delta_asset_watcher",
        schedule=[orders],
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["delta", "example"],
    ) as dag:

        @task
        def announced_range(triggering_asset_events=None) -> dict:
            """The range(s) the watcher announced, for the log and for downstream tasks."""
            payloads = [event.extra["payload"] for event in triggering_asset_events[orders]]
            return {
                "start_version": min(p["start_version"] for p in payloads),
                "end_version": max(p["end_version"] for p in payloads),
            }

        load = DeltaIncrementalOperator(
            task_id="load_new_versions",
            table_uri=SOURCE,
            watermark_store="variable",
            watermark_key="orders_watermark_from_events",
            target=TARGET,
            conn_id="spark_default",
        )
        announced_range() >> load
    return dag
# [END howto_trigger_delta_version_asset_watcher]


if AssetWatcher is not None:
    orders_dag()
