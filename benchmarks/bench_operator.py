"""DeltaIncrementalOperator end to end vs a bare SparkSubmitOperator, side by side in one run.

Both submit one ``spark-submit`` to ``local[2]`` and write the same rows as Parquet:

* baseline: a ``SparkSubmitOperator`` whose application runs
  ``spark.read.parquet(<the range's data files>).write.parquet(out)``;
* operator: ``DeltaIncrementalOperator`` over the same version range with ``sink="parquet"``
  (plans from the log before submitting, ships a spec, reads through the Spark layer, writes,
  counts what it wrote, reads the result back). Also with the default ``sink="delta"`` (the
  same write plus a ``deltalake`` commit with a ``txn`` action).

Goal: operator / baseline <= 1.3 in wall time.

Run: ``.venv/bin/python benchmarks/bench_operator.py [--commits 10] [--rows 200000]
[--repeat 1]``; a warm-up round and each timed round submit three jobs each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
from bench_core import median_seconds  # noqa: E402
from deltalake import write_deltalake  # noqa: E402

BASELINE_APP = """
import json, sys
from pyspark.sql import SparkSession
files, out = json.load(open(sys.argv[1])), sys.argv[2]
spark = SparkSession.builder.getOrCreate()
spark.read.parquet(*files).write.mode("overwrite").parquet(out)
spark.stop()
"""
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def build_source(path: Path, commits: int, rows: int) -> None:
    for commit in range(commits):
        ids = pa.array(range(commit * rows, (commit + 1) * rows), pa.int64())
        names = pa.array([f"name-{i % 1000}" for i in range(rows)])
        write_deltalake(str(path), pa.table({"id": ids, "name": names}), mode="append")


def bench_workdir(prefix: str, spark_conn_id: str) -> Path:
    """A fresh folder holding the Airflow home, and a ``local[2]`` Spark connection for the run;
    ``spark-submit`` is looked up next to this Python."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.setdefault("AIRFLOW_HOME", str(workdir / "airflow"))
    os.environ[f"AIRFLOW_CONN_{spark_conn_id.upper()}"] = json.dumps(
        {"conn_type": "spark", "host": "local[2]"})
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
    return workdir


def context() -> dict:
    """What the operators read from the task context outside a DAG run."""
    return {"run_id": f"bench_{uuid.uuid4().hex}",
            "outlet_events": defaultdict(lambda: SimpleNamespace(extra=None)),
            # the load's record goes to XCom: nowhere, outside a DAG run
            "ti": SimpleNamespace(dag_id="bench", task_id="bench", start_date=None,
                                  xcom_push=lambda **_: None)}


def baseline(workdir: Path, files: list[str]):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    app, file_list = workdir / "baseline_app.py", workdir / "files.json"
    app.write_text(BASELINE_APP)
    file_list.write_text(json.dumps(files))
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}

    def run() -> None:
        SparkSubmitOperator(
            task_id="baseline", application=str(app), conn_id="spark_bench", conf=SPARK_CONF,
            application_args=[str(file_list), str(workdir / f"baseline-{uuid.uuid4().hex}")],
            env_vars=env,
        ).execute(context())

    return run


def operator(source: Path, workdir: Path, end_version: int, sink: str):
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    def run() -> None:
        DeltaIncrementalOperator(
            task_id=f"operator_{sink}", table_uri=str(source), start_version=0,
            end_version=end_version, target=str(workdir / f"{sink}-{uuid.uuid4().hex}"),
            sink=sink, conn_id="spark_bench", conf=SPARK_CONF,
        ).execute(context())

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--rows", type=int, default=200_000, help="rows per commit")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    workdir = bench_workdir("bench-operator-", "spark_bench")
    from airflow_provider_delta.core import plan_changes

    source = workdir / "source"
    build_source(source, args.commits, args.rows)
    plan = plan_changes(str(source), 0, args.commits - 1)
    print(f"source: {args.commits} commits x {args.rows} rows, {len(plan)} files, "
          f"{plan.total_bytes / 1e6:.1f} MB")

    timings = median_seconds({
        "baseline": baseline(workdir, [f.path for f in plan.files]),
        "operator (parquet sink)": operator(source, workdir, args.commits - 1, "parquet"),
        "operator (delta sink)": operator(source, workdir, args.commits - 1, "delta"),
    }, args.repeat)
    base = timings["baseline"]
    for name, seconds in timings.items():
        print(f"{name:<26} {seconds:7.1f} s   {seconds / base:5.2f}x baseline")
    print("goal: operator (parquet sink) <= 1.3x baseline")


if __name__ == "__main__":
    main()
