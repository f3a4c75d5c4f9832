"""Incremental loads submitted to a cluster: Spark standalone, YARN and Kubernetes.

The connection decides where Spark runs (``conn_id``; e.g. ``spark://master:7077``,
``yarn``, ``k8s://https://api:6443``). The driver program needs this package:

* ``ship_package=True`` zips ``airflow_provider_delta`` and sends it with ``py_files``; the
  cluster's Python still needs ``deltalake``, ``pyarrow``, ``obstore`` and ``pyspark``, or
* install the wheel (``pip install airflow-provider-delta``) into the cluster's image.

In cluster deploy mode the driver runs on the cluster, so the job spec and result go through
``work_dir`` on shared storage: one folder per try (``<dag>.<task>.<run id>.<map index>.<try>``)
holding ``spec.json`` and ``result.json``, deleted when the task ends; no credentials are in
them. Spark reads ``s3://`` tables through ``s3a://`` (the hadoop-aws jars and credentials
must be on the cluster). The delta connection's storage options are not sent to drivers on
YARN, Kubernetes or in cluster deploy mode (the Spark provider would put them on the
command line): the cluster's own credentials (instance role, ``AWS_*`` in the driver's
environment) serve the driver's log reads and Delta commits.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

SOURCE = os.environ.get("DELTA_EXAMPLE_SOURCE", "s3://lake/bronze/orders")
TARGET = os.environ.get("DELTA_EXAMPLE_TARGET", "s3://lake/silver/orders")
WORK_DIR = os.environ.get("DELTA_EXAMPLE_WORK_DIR", "s3://lake/_airflow_delta_jobs")

# [START howto_operator_delta_clusters]
CLUSTERS = {
    # spark://host:7077; Python drivers run in client mode on standalone clusters.
    "standalone": {"conn_id": "spark_standalone", "total_executor_cores": 4},
    # YARN cluster mode; durable=True reconnects after a worker restart through the RM API.
    "yarn": {"conn_id": "spark_yarn", "deploy_mode": "cluster", "num_executors": 4,
             "yarn_track_via_rm_api": True},
    # Kubernetes: an image that has pyspark, deltalake, pyarrow and obstore installed.
    "k8s": {"conn_id": "spark_k8s", "deploy_mode": "cluster",
            "conf": {"spark.kubernetes.container.image": "my-registry/spark-delta:4.0",
                     "spark.kubernetes.file.upload.path": f"{WORK_DIR}/uploads"}},
}

for cluster, submit_options in CLUSTERS.items():
    with DAG(f"delta_incremental_{cluster}", schedule="@hourly", start_date=datetime(2024, 1, 1),
             catchup=False) as dag:
        watermark = {"watermark_store": "variable", "watermark_key": f"orders_{cluster}"}
        new_versions = DeltaVersionSensor(
            task_id="new_versions", table_uri=SOURCE, delta_conn_id="delta_default",
            mode="reschedule", poke_interval=60, **watermark,
        )
        load = DeltaIncrementalOperator(
            task_id="load", table_uri=SOURCE, sensor_task_id="new_versions", target=TARGET,
            delta_conn_id="delta_default", ship_package=True, work_dir=WORK_DIR,
            max_bytes=2 * 1024**3, **watermark, **submit_options,
        )
        new_versions >> load
    globals()[dag.dag_id] = dag
# [END howto_operator_delta_clusters]
