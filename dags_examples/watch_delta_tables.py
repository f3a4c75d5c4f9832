"""Event-driven: one DAG per Delta table, run whenever its table gets new versions.

Each table is an asset with an ``AssetWatcher`` running ``DeltaVersionTrigger`` in the
triggerer. A triggerer runs all of them in one event loop, and triggers on the same table
(same URI, connection and ``poll_interval``) share one listing of ``_delta_log`` per interval;
an idle table costs a few ``stat`` calls (local) or one start-after LIST (object stores) per
interval, and an idle trigger wakes once a minute at most. A table that does not exist yet is
waited for (the watcher logs it once a minute); its first event is then the snapshot at its
first version (``initial="snapshot"``, the default).

Each DAG's task reads the range its watcher announced last (``inlet_events``): payload
``{"status": "success", "table_uri", "start_version", "end_version",
"latest_commit_timestamp", "mode"}``. Delivery is at least once: act on ``end_version``
idempotently, or load from your own watermark as ``asset_watcher_delta.py`` does.

Set ``DELTA_WATCHED_TABLES`` (comma-separated paths or URIs) and ``DELTA_WATCH_POLL_SECONDS``.
Needs Airflow >= 3.0 (``AssetWatcher``); on Airflow 2 this file defines no DAG: poll with
``DeltaVersionSensor`` as ``sensor_incremental.py`` does.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_delta.triggers import DeltaVersionTrigger

try:
    from airflow.sdk import Asset, AssetWatcher  # Airflow >= 3.0
except ImportError:  # Airflow 2
    AssetWatcher = None

TABLES = os.environ.get(
    "DELTA_WATCHED_TABLES", "/tmp/delta-example/orders,/tmp/delta-example/customers"
).split(",")
POLL_SECONDS = float(os.environ.get("DELTA_WATCH_POLL_SECONDS", "30"))


# [START howto_trigger_delta_version_watch_tables]
def watched_table_dag(table_uri: str) -> DAG:
    name = table_uri.rstrip("/").rsplit("/", 1)[-1]
    table = Asset(
        name=f"delta_{name}",
        uri=table_uri if "://" in table_uri else f"file://{table_uri}",
        watchers=[AssetWatcher(
            name=f"delta_{name}_versions",
            trigger=DeltaVersionTrigger(table_uri=table_uri, poll_interval=POLL_SECONDS),
        )],
    )
    with DAG(dag_id=f"delta_{name}_changed", schedule=[table], start_date=datetime(2024, 1, 1),
             catchup=False, max_active_runs=1, tags=["delta", "example"]) as dag:

        @task(inlets=[table])
        def announced_range(inlet_events=None) -> dict:
            """The range the watcher announced last (what a load would read)."""
            payload = inlet_events[table][-1].extra["payload"]
            return {key: payload[key] for key in ("mode", "start_version", "end_version")}

        announced_range()
    return dag
# [END howto_trigger_delta_version_watch_tables]


if AssetWatcher is not None:
    for watched in TABLES:
        watched_table_dag(watched)
