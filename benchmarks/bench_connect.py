"""The same small incremental load through spark-submit and through Spark Connect, alternating.

Each task is ``DeltaIncrementalOperator.execute`` of the source's newest commit into a new Delta
target (the exactly-once ``delta`` sink): once with a ``spark`` connection (``local[2]``; a
``spark-submit`` JVM per task), once with a ``spark_connect`` connection to a server on
127.0.0.1 started from the pyspark wheel (``local[2]`` as well) before the first round and
stopped by its PID at the end. A warm-up round of both comes first.

Each Connect task is also split (:mod:`connect_clock`) into **Spark's** time (the RPCs that
run the job's actions: its queries and its write) and **ours** (everything else: the Airflow
skin, planning from the log, the sink's reads of the target, the commit, the session's setup
and the round trips for schemas, confs and commands); medians per task, with the round trips
of a task by kind. ``--append`` loads into one target that each task appends to (the sink's
own commit) instead of a new target per task (deltalake creates it); ``--profile FILE``
writes a cProfile of one more Connect task; ``--no-submit`` skips spark-submit. Also printed:
the imports a task in a fresh process pays before any of this (the split runs warm).

Goals: on Connect <= 3 s a task and >= 5x faster than spark-submit; ours <= 0.2 s a task.

Run: ``.venv/bin/python benchmarks/bench_connect.py [--commits 10] [--rows 1000] [--repeat 5]
[--append] [--no-submit] [--profile FILE]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_core import median_seconds  # noqa: E402
from bench_operator import SPARK_CONF, bench_workdir, build_source, context  # noqa: E402
from connect_clock import RpcTimes, rpc_clock  # noqa: E402

from dags_examples.local_connect_server import LocalConnectServer  # noqa: E402


def load(source: Path, target: Path | None, version: int, conn_id: str, conf: dict[str, str]):
    """A task loading ``version``: into ``target``, or into a new target each time."""
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    def run() -> None:
        result = DeltaIncrementalOperator(
            # a task id of its own: a new appId, so that a shared target takes the version again
            task_id=f"load_{conn_id}_{uuid.uuid4().hex[:8]}", table_uri=str(source),
            start_version=version, end_version=version, conn_id=conn_id, conf=conf,
            target=str(target or source.parent / f"{conn_id}-{uuid.uuid4().hex}"),
            allow_overlapping_writers=target is not None,
        ).execute(context())
        assert result["rows"] > 0, result

    return run


def split_connect(task, repeat: int) -> tuple[list[float], dict[str, int]]:
    """Medians of ``repeat`` tasks (after a warm-up): wall, Spark's actions, ours, our round
    trips' share of ours; and the round trips of ours in the last task."""
    task()
    split: list[list[float]] = [[], [], [], []]
    times = RpcTimes()
    for _ in range(repeat):
        with rpc_clock() as times:
            started = time.perf_counter()
            task()
            wall = time.perf_counter() - started
        for column, value in zip(split, (wall, times.spark(), wall - times.spark(),
                                         times.round_trip_seconds())):
            column.append(value)
    return [statistics.median(column) for column in split], times.round_trips()


def profile(task, path: str) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(task)
    profiler.dump_stats(path)
    print(f"cProfile of one Connect task: {path}")


_COLD_IMPORTS = """import sys, time
sys.path.insert(0, sys.argv[1])
started = time.perf_counter()
import airflow_provider_delta.job.connect, pyspark.sql.connect.session
print(time.perf_counter() - started)
"""


def cold_import_seconds(workdir: Path) -> float:
    """What a task in a fresh process pays to import the Connect job and pyspark's Connect
    client (pandas among them), Airflow already imported; a script file, as ``python -c``
    sends pyspark's import down its doctest path."""
    script = workdir / "cold_imports.py"
    script.write_text("import airflow.sdk\n" + _COLD_IMPORTS)
    done = subprocess.run([sys.executable, str(script), str(Path(__file__).resolve().parents[1])],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--rows", type=int, default=1000, help="rows per commit")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--append", action="store_true",
                        help="every task appends to one target (the sink's own commit)")
    parser.add_argument("--no-submit", action="store_true", help="Connect only")
    parser.add_argument("--profile", metavar="FILE", help="cProfile one more Connect task")
    args = parser.parse_args()

    workdir = bench_workdir("bench-connect-", "spark_submit")
    source = workdir / "source"
    build_source(source, args.commits, args.rows)
    newest = args.commits - 1
    target = workdir / "target" if args.append else None
    print(f"source: {args.commits} commits x {args.rows} rows; each task loads version {newest}"
          f" into {'one target it appends to' if target else 'a new target'}")
    print(f"before: {uptime()}")

    server = LocalConnectServer(workdir / "connect-server.log",
                                confs={"spark.sql.shuffle.partitions": "2"})
    with server:
        os.environ["AIRFLOW_CONN_SPARK_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": "localhost", "port": server.port})
        connect = load(source, target, newest, "spark_connect", {})
        if not args.no_submit:
            timings = median_seconds({
                "spark-submit": load(source, target, newest, "spark_submit", SPARK_CONF),
                "spark-connect": connect,
            }, args.repeat)
            submit, whole = timings["spark-submit"], timings["spark-connect"]
            print(f"spark-submit   {submit:6.2f} s a task (median of {args.repeat})")
            print(f"spark-connect  {whole:6.2f} s a task")
            print(f"ratio: Connect is {submit / whole:.1f}x faster; "
                  "goal: <= 3 s a task on Connect and >= 5x")
        (wall, spark, ours, trips_s), trips = split_connect(connect, args.repeat)
        print(f"Connect task split (medians of {args.repeat}): {wall:.3f} s a task; Spark's "
              f"actions {spark:.3f} s; ours {ours:.3f} s (goal <= 0.2 s), of which round trips "
              f"{trips_s:.3f} s: {dict(sorted(trips.items()))}")
        cold = statistics.median(cold_import_seconds(workdir) for _ in range(3))
        print(f"a fresh task process also imports the Connect job and client: {cold:.3f} s "
              "(median of 3; not in the split above, which runs in one warm process)")
        if args.profile:
            profile(connect, args.profile)
    print(f"after: {uptime()}")
    shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
