"""Keep a Delta table equal to a source that gets UPDATE, DELETE and MERGE, with Spark.

``load_changes`` reads the row changes of the versions after the watermark (``change_feed=True``:
inserts, deletes and update images with ``_change_type``, ``_commit_version`` and
``_commit_timestamp``; exact also where the source has the Change Data Feed off) and applies
them to ``TARGET`` by the key ``customer_id`` (``sink="delta-merge"``): per key the last change
of the range wins, deletes delete. Each batch is one MERGE commit carrying a ``txn`` action, so
a run that dies part-way and is retried applies nothing twice; the watermark (the Variable
``customers_watermark``) moves only after the commits. The first run loads the current
snapshot (``initial="snapshot"``), later runs the changes since.

Set ``DELTA_EXAMPLE_SOURCE`` and ``DELTA_EXAMPLE_TARGET`` to try it on your own tables.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_delta.operators.delta_load import DeltaIncrementalOperator

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "/tmp/delta-example/customers")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "/tmp/delta-example/customers_copy")

# [START howto_operator_delta_change_feed_merge]
with DAG(
    dag_id="delta_change_feed_merge",
    schedule=timedelta(hours=1),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # each run starts at the previous run's watermark
    tags=["delta", "example"],
) as dag:
    load_changes = DeltaIncrementalOperator(
        task_id="load_changes",
        table_uri=SOURCE,
        watermark_store="variable",
        watermark_key="customers_watermark",
        change_feed=True,
        sink="delta-merge",
        merge_keys=["customer_id"],
        target=TARGET,
        max_files=200,  # batches of at most ~200 files, each its own MERGE commit
        conn_id="spark_default",
    )
# [END howto_operator_delta_change_feed_merge]
