"""The same one-version load over Spark Connect into a target of 100 commits and one of 20,000.

Each target starts with one load of this provider (source version 0), then other writers'
appends (one file each) up to its size, a checkpoint every 100 versions as deltalake writes
them. Each round then loads the next source version into both targets (``delta`` sink, a task
of its own per target), alternating, through a Spark Connect server on 127.0.0.1 started
from the pyspark wheel and stopped by its PID. Also printed, for context: what the sink reads
of the target (``TargetLog.open``) and what the earlier layout read (``DeltaTable.history()``).

The rounds alternate which side goes first; printed: each side's median and quartiles, their
ratio, and the load average around the rounds. The benchmark's folder (a target of 20,000
files) is deleted at the end.

Goal: task time at 20,000 commits <= 1.2x the task time at 100.

Run: ``.venv/bin/python benchmarks/bench_target_history.py [--commits 100,20000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from bench_core import median_seconds  # noqa: E402
from bench_operator import bench_workdir, build_source, context  # noqa: E402

from dags_examples.local_connect_server import LocalConnectServer  # noqa: E402
from tests.operators.long_history import grow_with_foreign_appends  # noqa: E402

OTHER_ROWS = pa.table({"id": pa.array([-1], pa.int64()), "name": ["other writer"]})


def operator(source: Path, target: Path, version: int):
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    return DeltaIncrementalOperator(
        task_id=f"load_{target.name}", table_uri=str(source), start_version=version,
        end_version=version, target=str(target), conn_id="spark_connect")


def build_target(source: Path, target: Path, commits: int) -> None:
    started = time.perf_counter()
    result = operator(source, target, 0).execute(context())
    assert result["rows"] > 0, result
    grow_with_foreign_appends(target, commits - 1, OTHER_ROWS)
    print(f"target of {commits} commits built in {time.perf_counter() - started:.1f} s")


class Rounds:
    """Round ``n`` of a target loads source version ``n`` (one new version per task)."""

    def __init__(self, source: Path, target: Path):
        self.source, self.target, self.version = source, target, 0

    def __call__(self) -> None:
        self.version += 1
        result = operator(self.source, self.target, self.version).execute(context())
        assert result["rows"] > 0, result


def target_reads(source: Path, targets: dict[int, Path], repeat: int) -> None:
    from deltalake import DeltaTable

    from airflow_provider_delta.job.sinks.target_log import TargetLog

    sinks = {n: operator(source, p, 0).sink_spec() for n, p in targets.items()}
    ours = median_seconds({n: (lambda s=s: TargetLog.open(s).first_unwritten(10**6, None))
                           for n, s in sinks.items()}, repeat)
    history = median_seconds({n: (lambda p=p: DeltaTable(str(p)).history())
                              for n, p in targets.items()}, 1)
    for n in targets:
        print(f"  {n:>6} commits: TargetLog.open + first_unwritten {ours[n] * 1000:7.1f} ms; "
              f"DeltaTable.history() (the earlier layout's read) {history[n] * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", default="100,20000", help="the two target sizes")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    small, large = (int(n) for n in args.commits.split(","))

    workdir = bench_workdir("bench-target-history-", "spark_submit")
    try:
        run(workdir, small, large, args.repeat)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the 20,000-file target


def run(workdir: Path, small: int, large: int, repeat: int) -> None:
    source = workdir / "source"
    build_source(source, repeat + 2, 1000)
    server = LocalConnectServer(workdir / "connect-server.log",
                                confs={"spark.sql.shuffle.partitions": "2"})
    with server:
        os.environ["AIRFLOW_CONN_SPARK_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": "localhost", "port": server.port})
        targets = {n: workdir / f"target-{n}" for n in (small, large)}
        for n, path in targets.items():
            build_target(source, path, n)
        print("what the sink reads of the target, median:")
        target_reads(source, targets, 5)
        print(f"load average before the rounds: {_load()}")
        timings = alternating_rounds({n: Rounds(source, p) for n, p in targets.items()},
                                     repeat)
        print(f"load average after the rounds: {_load()}")
    for n in targets:
        q1, median, q3 = statistics.quantiles(timings[n], n=4)
        print(f"target of {n:>6} commits: {median:6.3f} s a task (median of {repeat}; "
              f"quartiles {q1:.3f}-{q3:.3f})")
    medians = {n: statistics.median(values) for n, values in timings.items()}
    print(f"ratio {large}/{small}: {medians[large] / medians[small]:.2f} (goal <= 1.2)")


def alternating_rounds(actions: dict[int, Rounds], repeat: int) -> dict[int, list[float]]:
    """The times of each action in ``repeat`` rounds after a warm-up round, the order of the
    sides swapped every round so that neither always runs first."""
    timings: dict[int, list[float]] = {n: [] for n in actions}
    for round_number in range(repeat + 1):
        order = list(actions) if round_number % 2 else list(actions)[::-1]
        for n in order:
            started = time.perf_counter()
            actions[n]()
            if round_number:
                timings[n].append(time.perf_counter() - started)
    return timings


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
