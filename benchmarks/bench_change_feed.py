"""Change feed benchmark: read_change_feed against deltalake's load_cdf, and a merge load
against a full reload of the target.

Side by side in one run on one local SparkSession (the sides alternate, medians of
``--repeat`` warm runs after a warm-up of each; the first call of each side in the fresh
session is shown apart). Each side's CPU time (Spark's JVM and this process, all threads) is
printed beside its wall time: on a machine other jobs load, wall times swing with their load
while CPU times stay close to the work done.

1. The feed of a table's first ``--rows`` inserted rows (``--commits`` appends), CDF on and
   off: ``read_change_feed`` (log planning + one Spark job writing every row to Spark's
   ``noop`` sink) against Spark's floor, ``spark.read.parquet`` of the same files into
   ``noop``. Goal: ratio <= 1.5. With CDF on, also against ``load_cdf`` of the same range
   read into Arrow (deltalake, in process, no JVM).
2. A target of ``--rows`` rows in ``--files`` files clustered by key (as after OPTIMIZE or
   Z-order) gets one source commit that updates 1% of the rows, applied with the driver's
   ``run_job`` (``change_feed=True``, ``delta-merge`` sink), against rewriting the whole
   target from the source snapshot with ``run_job`` (``delta`` sink). Two cases: the changed
   keys are the most recent ones (clustered), or every hundredth key (spread over all files).
   Goal: speed-up >= 10 on the clustered case. Each side is a whole ``run_job`` in the warm
   session: planning from the source's log, the target's checks and txn check, reading the
   rows (the merge's small feed on the driver with Arrow; the rewrite's 1M rows with Spark),
   and the write and commit (deltalake's MERGE; Spark's Parquet write and a deltalake commit).

Usage: ``python benchmarks/bench_change_feed.py [--rows 1000000] [--commits 10] [--files 40]
[--repeat 3] [--part feed|merge|both]``. Tables are written with ``deltalake`` into a temp
folder.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from bench_spark_reader import local_spark, noop_write, timed_pair
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import LoadStart, plan_change_feed
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from airflow_provider_delta.spark import read_change_feed

_CDF_ON = {"delta.enableChangeDataFeed": "true"}


def rows_of(first: int, count: int) -> pa.Table:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.table({"id": ids, "value": ids * 3, "label": pa.array(ids).cast(pa.string())})


def write_clustered(path: str, rows: int, files: int, configuration=None) -> None:
    """``rows`` rows with ascending ids in ``files`` appends, one file each."""
    per_file = rows // files
    for number in range(files):
        write_deltalake(path, rows_of(number * per_file, per_file), mode="append",
                        configuration=configuration if not number else None)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


class CpuClock:
    """CPU seconds used so far by Spark's local JVM and this process (all threads), from
    /proc; None where there is no /proc."""

    def __init__(self, spark):
        self.stat = f"/proc/{spark._jvm.java.lang.ProcessHandle.current().pid()}/stat"
        self.tick = os.sysconf("SC_CLK_TCK")

    def __call__(self) -> float | None:
        try:
            with open(self.stat) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self.tick + time.process_time()


def side_by_side(clock: CpuClock, sides: dict[str, Callable[[], object]], repeat: int
                 ) -> dict[str, tuple[float, float | None]]:
    """Median (wall, CPU) seconds of each side, run alternately after one warm-up each."""
    for action in sides.values():
        action()
    spent: dict[str, list[tuple[float, float | None]]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, action in sides.items():
            cpu, start = clock(), time.perf_counter()
            action()
            wall, cpu_end = time.perf_counter() - start, clock()
            spent[name].append((wall, None if cpu is None else cpu_end - cpu))
    return {name: (statistics.median(w for w, _ in runs),
                   None if runs[0][1] is None else statistics.median(c for _, c in runs))
            for name, runs in spent.items()}


def bench_feed(spark, work: Path, rows: int, commits: int, repeat: int) -> None:
    clock = CpuClock(spark)
    for cdf in (True, False):
        source = str(work / f"feed-source-{'on' if cdf else 'off'}")
        write_clustered(source, rows, commits, _CDF_ON if cdf else None)
        end = commits - 1
        paths = plan_change_feed(source, 0, end).file_table.column("path").to_pylist()
        ours = noop_write(lambda: read_change_feed(spark, source, 0, end))
        plain = noop_write(lambda: spark.read.parquet(*paths))
        first_ours = timed(ours)
        times = side_by_side(clock, {"ours": ours, "floor": plain}, repeat)
        (wall, cpu), (floor_wall, floor_cpu) = times["ours"], times["floor"]
        cpus = (f"; CPU {cpu:.2f}s vs {floor_cpu:.2f}s, {cpu / floor_cpu:.2f}x"
                if cpu is not None else "")
        print(f"1. feed of {rows} rows in {commits} commits, CDF {'on' if cdf else 'off'}: "
              f"read_change_feed {wall:.3f}s (first call in the session {first_ours:.3f}s); "
              f"Spark's floor, spark.read.parquet of the same files: {floor_wall:.3f}s; "
              f"ratio {wall / floor_wall:.2f}x{cpus} (goal <= 1.5x); load average "
              f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if cdf:
            def theirs() -> None:
                pa.table(DeltaTable(source).load_cdf(starting_version=0, ending_version=end))

            warm_ours, warm_theirs = timed_pair(ours, theirs, repeat)
            print(f"   against deltalake's load_cdf into Arrow (in process, no JVM): "
                  f"{warm_ours:.3f}s vs {warm_theirs:.3f}s, {warm_ours / warm_theirs:.2f}x")
        shutil.rmtree(source, ignore_errors=True)


def merge_job(source: str, target: str, version: int) -> JobSpec:
    sink = SinkSpec(kind="delta-merge", path=target, app_id="bench", merge_keys=("id",))
    return JobSpec(table_uri=source, start=LoadStart("changes", version), sink=sink,
                   end_version=version, change_feed=True)


def reload_job(source: str, target: str, version: int) -> JobSpec:
    sink = SinkSpec(kind="delta", path=target, app_id="bench")
    return JobSpec(table_uri=source, start=LoadStart("snapshot", version), sink=sink)


def bench_merge(spark, work: Path, rows: int, files: int, repeat: int) -> None:
    source, target = str(work / "merge-source"), str(work / "merge-target")
    write_clustered(source, rows, files, _CDF_ON)
    write_clustered(target, rows, files)
    cases = {
        "clustered (the newest 1% of keys)": f"id >= {rows - rows // 100}",
        "spread (every 100th key)": "id % 100 = 7",
    }
    reloads = (str(work / f"reload-{n}") for n in itertools.count())
    for case, predicate in cases.items():
        DeltaTable(source).update(updates={"label": "'changed'"}, predicate=predicate)
        version = DeltaTable(source).version()
        copies = []  # a fresh target per merge run: a txn applies once
        for _ in range(repeat + 1):
            copies.append(str(work / f"target-{len(os.listdir(work))}"))
            shutil.copytree(target, copies[-1])
        targets = iter(copies)
        merge, reload = timed_pair(
            lambda: run_job(spark, merge_job(source, next(targets), version)),
            lambda: run_job(spark, reload_job(source, next(reloads), version)),
            repeat,
        )
        metrics = _merge_metrics(copies[-1])
        print(f"2. merge of 1% changed rows, {case}: {merge:.3f}s, rewrote "
              f"{metrics.get('num_target_files_removed')} of {files} files, deltalake's MERGE "
              f"itself {metrics.get('execution_time_ms')} ms; full rewrite of the target: "
              f"{reload:.3f}s; speed-up {reload / merge:.1f}x (goal >= 10x on the clustered "
              "case)")


def _merge_metrics(path: str) -> dict:
    """The operation metrics of the target's last commit (the merge)."""
    return DeltaTable(path).history(1)[0].get("operationMetrics", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=("feed", "merge", "both"), default="both")
    args = parser.parse_args()

    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-change-feed-"))
    if args.part != "merge":
        bench_feed(spark, work, args.rows, args.commits, args.repeat)
    if args.part != "feed":
        bench_merge(spark, work, args.rows, args.files, args.repeat)
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
