"""Change feed benchmark: read_change_feed against deltalake's load_cdf, and a merge load
against a full reload of the target.

Two measurements, each side by side in one run on one local SparkSession (the sides alternate):

1. The feed of a CDF table's first ``--rows`` inserted rows: ``read_change_feed`` followed by a
   full write to Spark's ``noop`` sink, against ``load_cdf`` of the same range read into Arrow.
   Goal: ratio <= 1.5.
2. Applying a commit that updates 1% of the rows to a copy of the target with the driver's
   ``run_job`` (``change_feed=True``, ``delta-merge`` sink), against reloading the whole
   snapshot into a new Delta table with ``run_job`` (``delta`` sink). Goal: speed-up >= 10.

Usage: ``python benchmarks/bench_change_feed.py [--rows 1000000] [--commits 10] [--repeat 3]``.
Tables are written with ``deltalake`` into a temp folder.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from bench_spark_reader import local_spark, noop_write, timed_pair
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from airflow_provider_delta.spark import read_change_feed

_CDF_ON = {"delta.enableChangeDataFeed": "true"}


def build_source(path: str, rows: int, commits: int) -> int:
    """``commits`` appends of ``rows / commits`` rows, then an UPDATE of the first 1% of ids
    (its cdc files hold the change); returns the UPDATE's version."""
    per_commit = rows // commits
    for commit in range(commits):
        ids = np.arange(commit * per_commit, (commit + 1) * per_commit, dtype=np.int64)
        batch = pa.table({"id": ids, "value": ids * 3, "label": pa.array(ids).cast(pa.string())})
        write_deltalake(path, batch, mode="append", configuration=_CDF_ON if not commit else None)
    table = DeltaTable(path)
    table.update(updates={"label": "'changed'"}, predicate=f"id < {rows // 100}")
    return table.version()


def merge_job(source: str, target: str, start: int, end: int) -> JobSpec:
    sink = SinkSpec(kind="delta-merge", path=target, app_id="bench", merge_keys=("id",))
    return JobSpec(table_uri=source, mode="changes", sink=sink, start_version=start,
                   end_version=end, change_feed=True)


def reload_job(source: str, target: str, version: int) -> JobSpec:
    sink = SinkSpec(kind="delta", path=target, app_id="bench")
    return JobSpec(table_uri=source, mode="snapshot", sink=sink, snapshot_version=version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-change-feed-"))
    source = str(work / "source")
    start = time.perf_counter()
    update = build_source(source, args.rows, args.commits)
    print(f"source: {args.commits} commits x {args.rows // args.commits} rows, then an UPDATE "
          f"of 1% (version {update}), written in {time.perf_counter() - start:.1f}s")

    last_insert = update - 1
    ours, theirs = timed_pair(
        noop_write(lambda: read_change_feed(spark, source, 0, last_insert)),
        lambda: pa.table(DeltaTable(source).load_cdf(starting_version=0,
                                                     ending_version=last_insert)),
        args.repeat,
    )
    print(f"1. feed of {args.rows} rows: read_change_feed {ours:.3f}s; load_cdf {theirs:.3f}s; "
          f"ratio {ours / theirs:.2f}x (goal <= 1.5x)")

    loaded = str(work / "loaded")
    run_job(spark, merge_job(source, loaded, 0, last_insert))
    copies = []
    for number in range(args.repeat + 1):  # one fresh target per merge run (a txn applies once)
        copies.append(str(work / f"target-{number}"))
        shutil.copytree(loaded, copies[-1])
    targets, reloads = iter(copies), (str(work / f"reload-{n}") for n in itertools.count())
    merge, reload = timed_pair(
        lambda: run_job(spark, merge_job(source, next(targets), update, update)),
        lambda: run_job(spark, reload_job(source, next(reloads), update)),
        args.repeat,
    )
    print(f"2. merge load of 1% changed rows: {merge:.3f}s; full reload of the target: "
          f"{reload:.3f}s; speed-up {reload / merge:.1f}x (goal >= 10x)")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
