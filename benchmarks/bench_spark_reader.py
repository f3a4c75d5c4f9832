"""Spark reader benchmark: overhead against plain Parquet, and incremental against full reads.

Two measurements, each side by side in one run on one local SparkSession:

1. ``read_changes`` over the N files of a version range, against ``spark.read.parquet`` of the
   same files, each followed by the same actions (``count()`` and a full write to Spark's
   ``noop`` sink). Goal: ratio <= 1.15.
2. Loading only the newest commit (1% of the table's files) with ``read_changes``, against
   reprocessing the whole table with ``read_snapshot``; same action (noop write).
   Goal: full / incremental >= 20.
3. A big plan into Spark: ``read_changes`` over a range of ``--big-files`` files (one small
   Parquet file hard-linked that many times, the log written here) up to the DataFrame being
   ready, before any action (planning, the files' existence check and the file index handed to
   Spark). Its first call in the session is shown apart; then warm runs alternate with the
   previous hand-off of the same plan (its paths as one string, then Spark's own existence
   check and listing of each path) and run beside planning alone; then, once,
   ``spark.read.parquet(*paths)`` of the same paths from a Python list (one Py4J call per
   path). Goal: <= 1 s. With ``--no-big-baselines`` (for a million files), warm runs alternate
   instead with the ``_spark_metadata`` log hand-off (what a JVM that cannot compile
   ``PlanFileIndex`` gets, and the hand-off before it), and each stage after planning is also
   timed alone (the existence check, the hidden-name test, the paths as Spark spells them, the
   file index both ways); ``--big-table DIR`` keeps the table in ``DIR`` (built there if
   missing) for the next run.

Usage: ``python benchmarks/bench_spark_reader.py [--commits 100] [--files-per-commit 10]
[--rows-per-file 5000] [--range-commits 10] [--big-files 100000] [--repeat 3]
[--parts 1,2,3] [--no-big-baselines] [--big-table DIR] [--driver-memory 4g]``. Tables are written with ``deltalake`` into a temp folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_delta.core import plan_changes
from airflow_provider_delta.spark import read_changes, read_snapshot
from airflow_provider_delta.spark import file_index
from airflow_provider_delta.spark.handoff import java_strings
from airflow_provider_delta.spark.file_index import hidden_files, log_scans, scan_files
from airflow_provider_delta.spark.paths import spark_file_paths, spark_read_paths
from airflow_provider_delta.spark.reader import check_files_exist


_LINKS_PER_COPY = 50_000
_BYTES_PER_ROW = 20  # about what a row of this table takes in Parquet


def build_table(
    path: str, commits: int, files_per_commit: int, rows_per_file: int, partitioned: bool
) -> None:
    """``commits`` appends of ``files_per_commit`` files each: one per ``bucket`` partition, or
    (unpartitioned) about as many, split by the writer's target file size."""
    rows = files_per_commit * rows_per_file
    for commit in range(commits):
        ids = np.arange(commit * rows, (commit + 1) * rows, dtype=np.int64)
        batch = pa.table({
            "id": ids,
            "value": ids * 3,
            "label": pa.array(ids).cast(pa.string()),
            "bucket": ids % files_per_commit,
        })
        if partitioned:
            write_deltalake(path, batch, mode="append", partition_by=["bucket"])
        else:
            write_deltalake(path, batch, mode="append",
                            target_file_size=rows_per_file * _BYTES_PER_ROW)


def timed_pair(
    ours: Callable[[], object], baseline: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Median wall times of two actions run alternately (after one warm-up run of each), so a
    change in machine load hits both sides alike."""
    ours()
    baseline()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for action, bucket in ((ours, times[0]), (baseline, times[1])):
            start = time.perf_counter()
            action()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def count_and_write(df_factory: Callable[[], DataFrame]) -> Callable[[], None]:
    def run() -> None:
        df = df_factory()
        df.count()
        df.write.format("noop").mode("overwrite").save()

    return run


def noop_write(df_factory: Callable[[], DataFrame]) -> Callable[[], None]:
    return lambda: df_factory().write.format("noop").mode("overwrite").save()


def local_spark(driver_memory: str | None = None) -> SparkSession:
    """The benchmarks' SparkSession: local[2], UTC, quiet; Spark's default driver heap (1g)
    unless ``driver_memory`` is given."""
    builder = SparkSession.builder
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = (
        builder.master("local[2]")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_big_range(path: str, files: int, commits: int = 100) -> None:
    """A table whose versions 1..``commits`` add ``files`` files together: one small Parquet
    file hard-linked under every name (a copy per 50,000 links), the log written directly."""
    os.makedirs(os.path.join(path, "_delta_log"))
    source = os.path.join(path, "source.parquet")
    write_deltalake(source + ".table", pa.table({"id": pa.array([1, 2], pa.int64())}))
    first = next(f for f in os.listdir(source + ".table") if f.endswith(".parquet"))
    os.link(os.path.join(source + ".table", first), source)
    size = os.path.getsize(source)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    header = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
              {"metaData": {"id": "bench-big-range", "format": {"provider": "parquet",
                            "options": {}}, "schemaString": json.dumps(schema),
                            "partitionColumns": [], "configuration": {},
                            "createdTime": 1_700_000_000_000}}]
    _log_commit(path, 0, header)
    bounds = np.linspace(0, files, commits + 1).astype(int)
    for version in range(1, commits + 1):
        adds = []
        for number in range(bounds[version - 1], bounds[version]):
            name = f"part-{number:07d}.parquet"
            copy = f"{source}.{number // _LINKS_PER_COPY}"  # file systems cap links per inode
            if not os.path.exists(copy):
                shutil.copyfile(source, copy)
            os.link(copy, os.path.join(path, name))
            adds.append({"add": {"path": name, "partitionValues": {}, "size": size,
                                 "modificationTime": 1_700_000_000_000, "dataChange": True,
                                 "stats": '{"numRecords":2}'}})
        _log_commit(path, version, adds)


def _log_commit(path: str, version: int, actions: list[dict]) -> None:
    info = {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}}
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "w") as handle:
        handle.write("".join(json.dumps(a) + "\n" for a in [info, *actions]))


def bench_big_plan(spark: SparkSession, files: int, repeat: int, baselines: bool,
                   kept: str | None = None) -> None:
    folder = kept or tempfile.mkdtemp(prefix="bench-big-range-")
    try:
        path = folder + "/t"
        if not os.path.exists(path):
            started = time.perf_counter()
            build_big_range(path, files)
            print(f"table of {files} files written in {time.perf_counter() - started:.1f}s")
        _time_big_plan(spark, path, repeat, baselines)
    finally:
        if not kept:
            shutil.rmtree(folder)


def _time_big_plan(spark: SparkSession, path: str, repeat: int, baselines: bool = True
                   ) -> None:
    plan = plan_changes(path, 1, 100)
    paths = plan.file_table.column("path").combine_chunks()
    schema = "id long"

    def ours() -> None:
        read_changes(spark, path, 1, 100)

    def previous() -> None:
        """The hand-off before the file index: planning, the paths as one string, Spark's
        existence check and listing on the driver (no listing job)."""
        plan_changes(path, 1, 100)
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", str(2**31 - 1))
        try:
            spark.read.schema(schema)._jreader.parquet(
                java_strings(spark, spark_read_paths(paths)))
        finally:
            spark.conf.unset("spark.sql.sources.parallelPartitionDiscovery.threshold")

    def planning() -> None:
        plan_changes(path, 1, 100)

    started = time.perf_counter()
    ours()
    first = time.perf_counter() - started
    if not baselines:  # the hand-offs before the file index take minutes at a million files
        ready, logged = timed_pair(ours, lambda: _with_log_hand_off(spark, ours), repeat)
        _, planned = timed_pair(ours, planning, repeat)
        print(f"3. read_changes over {len(paths)} files up to the DataFrame: {ready:.3f}s "
              f"(planning {planned:.3f}s of it; the session's first call: {first:.3f}s); "
              f"with the _spark_metadata log hand-off: {logged:.3f}s, ratio "
              f"{ready / logged:.3f}x; load average {os.getloadavg()[0]:.2f}")
        print_stages(spark, plan, path, repeat)
        return
    ready, before = timed_pair(ours, previous, repeat)
    _, planned = timed_pair(ours, planning, repeat)
    started = time.perf_counter()
    spark.read.schema(schema).parquet(*paths.to_pylist())  # once: a Py4J call per path
    listed = time.perf_counter() - started
    print(f"3. read_changes over {len(paths)} files up to the DataFrame: {ready:.3f}s "
          f"(planning {planned:.3f}s of it; goal <= 1 s; the session's first call, with "
          f"Spark's code not yet compiled: {first:.3f}s); the previous hand-off (paths as one "
          f"string, Spark lists each): {before:.3f}s, ratio {ready / before:.3f}x; "
          f"spark.read.parquet(*paths) from a Python list: {listed:.3f}s, ratio "
          f"{ready / listed:.3f}x; load average {os.getloadavg()[0]:.2f}")


def _with_log_hand_off(spark: SparkSession, action: Callable[[], object]) -> None:
    """``action`` with the plan handed to Spark as ``_spark_metadata`` logs, as where
    ``PlanFileIndex`` does not compile."""
    gateway = spark.sparkContext._gateway
    compiled = file_index._INDEX_CLASSES.get(gateway)
    file_index._INDEX_CLASSES[gateway] = None
    try:
        action()
    finally:
        file_index._INDEX_CLASSES[gateway] = compiled


def print_stages(spark: SparkSession, plan, path: str, repeat: int) -> None:
    """Each stage of ``read_changes`` after planning, alone (median of ``repeat``): in the
    whole, the existence check runs on a thread beside the file index."""
    paths = plan.file_table.column("path").combine_chunks()
    spark_paths = spark_file_paths(paths)
    sizes = plan.file_table.column("size").combine_chunks()
    reader = spark.read.schema("id long")
    schema = spark.createDataFrame([], "id long").schema
    stages = {
        "existence check": lambda: check_files_exist(plan, None),
        "hidden names": lambda: hidden_files(paths),
        "paths as Spark spells them": lambda: spark_file_paths(paths),
        "file index (PlanFileIndex)": lambda: scan_files(spark, schema, spark_paths, sizes, path),
        f"file index as _spark_metadata logs ({len(log_scans(reader, spark_paths, sizes))} "
        "scans side by side)": lambda: log_scans(reader, spark_paths, sizes),
    }
    for name, stage in stages.items():
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            stage()
            times.append(time.perf_counter() - started)
        print(f"   {name}: {statistics.median(times):.3f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--files-per-commit", type=int, default=10)
    parser.add_argument("--rows-per-file", type=int, default=5000)
    parser.add_argument("--range-commits", type=int, default=10,
                        help="commits in the range of measurement 1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big-files", type=int, default=100_000)
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--no-big-baselines", action="store_true",
                        help="part 3: time our hand-off and planning only")
    parser.add_argument("--big-table", metavar="DIR",
                        help="part 3: the table's folder, kept (built there if missing)")
    parser.add_argument("--driver-memory", metavar="SIZE",
                        help="the driver's heap, e.g. 4g: 1M-file DataFrames take 0.3-0.4 GiB "
                             "each, and warm runs keep two or three alive at once")
    args = parser.parse_args()

    spark = local_spark(args.driver_memory)
    parts = args.parts.split(",")
    if "3" in parts:
        bench_big_plan(spark, args.big_files, args.repeat, not args.no_big_baselines,
                       args.big_table)
    if not {"1", "2"} & set(parts):
        spark.stop()
        return
    tables = {}
    for partitioned in (False, True):
        path = tempfile.mkdtemp(prefix="bench-spark-reader-")
        start = time.perf_counter()
        build_table(path, args.commits, args.files_per_commit, args.rows_per_file, partitioned)
        tables[partitioned] = path
        print(f"table ({'partitioned by bucket' if partitioned else 'unpartitioned'}): "
              f"{args.commits} commits x {args.files_per_commit} files x {args.rows_per_file} "
              f"rows, written in {time.perf_counter() - start:.1f}s")

    last = args.commits - 1
    first = last - args.range_commits + 1
    for partitioned, path in tables.items():
        files = [f.path for f in plan_changes(path, first, last).files]
        ours, plain = timed_pair(
            count_and_write(lambda: read_changes(spark, path, first, last)),
            count_and_write(lambda: spark.read.parquet(*files)),
            args.repeat,
        )
        kind = "partitioned" if partitioned else "unpartitioned"
        print(f"1. read_changes over {len(files)} files ({kind}): {ours:.3f}s; "
              f"spark.read.parquet of the same files: {plain:.3f}s; ratio {ours / plain:.2f}x "
              "(goal <= 1.15x)")

    path = tables[True]
    incremental, full = timed_pair(
        noop_write(lambda: read_changes(spark, path, last, last)),
        noop_write(lambda: read_snapshot(spark, path)),
        args.repeat,
    )
    share = 100 / args.commits
    print(f"2. incremental ({share:.1f}% of files): {incremental:.3f}s; full reprocessing: "
          f"{full:.3f}s; speed-up {full / incremental:.1f}x (goal >= 20x)")
    for folder in tables.values():
        shutil.rmtree(folder)
    spark.stop()


if __name__ == "__main__":
    main()
