"""The same small incremental load through spark-submit and through Spark Connect, alternating.

Each task is ``DeltaIncrementalOperator.execute`` of the source's newest commit into a new Delta
target (the exactly-once ``delta`` sink): once with a ``spark`` connection (``local[2]``; a
``spark-submit`` JVM per task), once with a ``spark_connect`` connection to a server on
127.0.0.1 started from the pyspark wheel (``local[2]`` as well) before the first round and
stopped by its PID at the end. A warm-up round of both comes first.

Goal: on Connect <= 3 s a task and >= 5x faster than spark-submit.

Run: ``.venv/bin/python benchmarks/bench_connect.py [--commits 10] [--rows 1000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_core import median_seconds  # noqa: E402
from bench_operator import SPARK_CONF, bench_workdir, build_source, context  # noqa: E402

from dags_examples.local_connect_server import LocalConnectServer  # noqa: E402


def load(source: Path, workdir: Path, version: int, conn_id: str, conf: dict[str, str]):
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    def run() -> None:
        result = DeltaIncrementalOperator(
            task_id=f"load_{conn_id}", table_uri=str(source), start_version=version,
            end_version=version, target=str(workdir / f"{conn_id}-{uuid.uuid4().hex}"),
            conn_id=conn_id, conf=conf,
        ).execute(context())
        assert result["rows"] > 0, result

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--rows", type=int, default=1000, help="rows per commit")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    workdir = bench_workdir("bench-connect-", "spark_submit")
    source = workdir / "source"
    build_source(source, args.commits, args.rows)
    newest = args.commits - 1
    print(f"source: {args.commits} commits x {args.rows} rows; each task loads version {newest}")

    server = LocalConnectServer(workdir / "connect-server.log",
                                confs={"spark.sql.shuffle.partitions": "2"})
    with server:
        os.environ["AIRFLOW_CONN_SPARK_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": "localhost", "port": server.port})
        timings = median_seconds({
            "spark-submit": load(source, workdir, newest, "spark_submit", SPARK_CONF),
            "spark-connect": load(source, workdir, newest, "spark_connect", {}),
        }, args.repeat)
    submit, connect = timings["spark-submit"], timings["spark-connect"]
    print(f"spark-submit   {submit:6.2f} s a task (median of {args.repeat})")
    print(f"spark-connect  {connect:6.2f} s a task")
    print(f"ratio: Connect is {submit / connect:.1f}x faster; "
          "goal: <= 3 s a task on Connect and >= 5x")


if __name__ == "__main__":
    main()
