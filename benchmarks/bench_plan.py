"""Benchmark of planning a table of many files, each case in a fresh process.

A partitioned table (``day`` date, ``bucket`` int) of ``--files`` live files: a classic
checkpoint Parquet at version 0 in the schema deltalake writes, then ``--commits`` JSON
commits, all appends except the last ten, which delete files of the checkpoint. The appends
add ``--range-files`` files together. Only the log is written: the planner and deltalake read
nothing else.

The ``stats-*`` cases plan another table, the shape of a big production table as a worker
meets it: ``--files`` AddFiles over 50 partitions in one commit, each with the statistics JSON
Spark and deltalake write (``numRecords``, min/max/null counts of four columns), then
deltalake's own checkpoint (one uncompressed row group of every file; ``stats-struct``: with
``stats_parsed`` too, ``delta.checkpoint.writeStatsAsStruct``; ``no-stats``: no statistics).

Cases, each run in its own subprocess that imports only what its side needs, as a worker
pays it (wall time of the call, and its CPU time over all threads, which other processes'
load inflates less; peak RSS of the whole process, imports included on both sides, from
``getrusage``; the RSS after the imports alone), interleaved round by round so load from
other processes weighs on all alike:

- ``stats-json``, ``stats-struct``, ``no-stats``: our ``plan_snapshot`` against deltalake's
  ``get_add_actions(flatten=True)`` on the production-shaped table.
- ``snapshot``: the same two on the synthetic log.
- ``changes``: our ``plan_changes`` over the appends against pyarrow's C++ JSON reader
  parsing the same commit files. deltalake has no call listing the files a version range
  added; reading the range's commits into Arrow is the floor any planner pays for it.
- ``first``: our ``plan_snapshot`` as the first thing a fresh process does, against the same
  plan in a process that imported pandas beforehand: what the first plan of a sensor poke or
  driver pays for imports pyarrow makes on its behalf (ratio 1 when it pays nothing).

Run: ``.venv/bin/python benchmarks/bench_plan.py [--files 1000000] [--repeat 3]
[--cases stats-json,stats-struct]``. The tables are generated once per size under
``--workdir`` and reused (``--drop`` deletes them after the run: 1M files take 0.6 GB each).
The subprocesses import the package of this checkout; ``--baseline-rev REV`` plans each case
once more with the package as it was at ``REV``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = str(Path(__file__).resolve().parents[1])

DELETE_COMMITS = 10
ROW_GROUP = 100_000
DAYS = 365
BUCKETS = 16
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "value", "type": "double", "nullable": True, "metadata": {}},
    {"name": "day", "type": "date", "nullable": True, "metadata": {}},
    {"name": "bucket", "type": "integer", "nullable": True, "metadata": {}},
]}
CASES = {"stats-json": ("plan_snapshot", "deltalake get_add_actions"),
         "stats-struct": ("plan_snapshot", "deltalake get_add_actions"),
         "no-stats": ("plan_snapshot", "deltalake get_add_actions"),
         "snapshot": ("plan_snapshot", "deltalake get_add_actions"),
         "changes": ("plan_changes", "pyarrow JSON read of the commits"),
         "first": ("plan_snapshot", "plan_snapshot after importing pandas")}
# the production-shaped table of each stats-* case: build_stats_table's ``stats``
STATS_CASES = {"stats-json": "json", "stats-struct": "struct", "no-stats": "none"}
PARTITIONS = 50


# -- the synthetic log -------------------------------------------------------------------

def build_log(path: Path, files: int, range_files: int, commits: int) -> Path:
    """Write (or reuse) the log; returns the table path."""
    done = path / "_delta_log" / "_complete"
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    (path / "_delta_log").mkdir(parents=True)
    deleted_per_commit = max(1, min(100, files // 1000))
    in_checkpoint = files - range_files + DELETE_COMMITS * deleted_per_commit
    checkpoint_schema = _checkpoint_schema(path.parent / "template")
    _write_checkpoint(path, checkpoint_schema, in_checkpoint)
    appends = commits - DELETE_COMMITS
    bounds = np.linspace(0, range_files, appends + 1).astype(int)
    for version in range(1, appends + 1):
        ids = range(in_checkpoint + bounds[version - 1], in_checkpoint + bounds[version])
        _write_commit(path, version, [{"add": _add_json(i)} for i in ids])
    for number in range(DELETE_COMMITS):
        ids = range(number * deleted_per_commit, (number + 1) * deleted_per_commit)
        _write_commit(path, appends + 1 + number, [{"remove": _remove_json(i)} for i in ids])
    done.touch()
    return path


def _checkpoint_schema(template: Path) -> pa.Schema:
    """The checkpoint schema deltalake writes, taken from a one-row table it checkpoints."""
    from deltalake import DeltaTable, write_deltalake

    shutil.rmtree(template, ignore_errors=True)
    write_deltalake(str(template), pa.table({"id": [1], "value": [1.0]}))
    DeltaTable(str(template)).create_checkpoint()
    schema = pq.read_schema(template / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    shutil.rmtree(template)
    return schema


def _file_path(i: int) -> str:
    return f"day={_day(i)}/bucket={i % BUCKETS}/part-{i:09d}-c000.snappy.parquet"


def _day(i: int) -> str:
    return str(np.datetime64("2024-01-01") + (i // BUCKETS) % DAYS)


def _stats(i: int) -> str:
    return (f'{{"numRecords":{1000 + i % 100},"minValues":{{"id":{i * 1000},"value":0.5}},'
            f'"maxValues":{{"id":{i * 1000 + 999},"value":99.5}},'
            f'"nullCount":{{"id":0,"value":0}}}}')


def _size(i: int) -> int:
    return 100_000 + (i * 7919) % 900_000


def _add_json(i: int) -> dict:
    return {"path": _file_path(i), "partitionValues": {"day": _day(i), "bucket": str(i % BUCKETS)},
            "size": _size(i), "modificationTime": 1_700_000_000_000 + i, "dataChange": True,
            "stats": _stats(i)}


def _remove_json(i: int) -> dict:
    return {"path": _file_path(i), "deletionTimestamp": 1_800_000_000_000, "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {"day": _day(i), "bucket": str(i % BUCKETS)}, "size": _size(i)}


def _write_commit(path: Path, version: int, actions: list[dict]) -> None:
    info = {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}}
    lines = [json.dumps(info)] + [json.dumps(a) for a in actions]
    (path / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def _write_checkpoint(path: Path, schema: pa.Schema, adds: int) -> None:
    name = path / "_delta_log" / f"{0:020d}.checkpoint.parquet"
    with pq.ParquetWriter(name, schema) as writer:
        writer.write_table(_table_actions(schema))
        for low in range(0, adds, ROW_GROUP):
            writer.write_table(_add_rows(schema, range(low, min(low + ROW_GROUP, adds))))
    (path / "_delta_log" / "_last_checkpoint").write_text(
        json.dumps({"version": 0, "size": adds + 2}))


def _table_actions(schema: pa.Schema) -> pa.Table:
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata = {"id": "bench-plan", "format": {"provider": "parquet", "options": []},
                "schemaString": json.dumps(SCHEMA), "partitionColumns": ["day", "bucket"],
                "createdTime": 1_700_000_000_000, "configuration": []}
    rows = [{"protocol": protocol}, {"metaData": metadata}]
    return pa.Table.from_pylist(rows, schema=schema)


def _add_rows(schema: pa.Schema, ids: range) -> pa.Table:
    add_type = schema.field("add").type
    values = {
        "path": pa.array([_file_path(i) for i in ids]),
        "partitionValues": pa.array(
            [[("day", _day(i)), ("bucket", str(i % BUCKETS))] for i in ids],
            add_type.field("partitionValues").type),
        "size": pa.array([_size(i) for i in ids], pa.int64()),
        "modificationTime": pa.array([1_700_000_000_000 + i for i in ids], pa.int64()),
        "dataChange": pa.array(np.ones(len(ids), bool)),
        "stats": pa.array([_stats(i) for i in ids]),
    }
    children = [values.get(f.name, _absent(f.type, len(ids))) for f in add_type]
    add = pa.StructArray.from_arrays(children, fields=list(add_type))
    columns = [add if f.name == "add" else _absent(f.type, len(ids)) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _absent(type_: pa.DataType, length: int) -> pa.Array:
    """Nulls of ``type_``; a null struct's fields hold placeholders, as Parquet's writer
    checks its non-nullable fields even under a null parent."""
    if not pa.types.is_struct(type_):
        return pa.nulls(length, type_)
    children = [_absent(f.type, length) if f.nullable else _placeholder(f.type, length)
                for f in type_]
    return pa.StructArray.from_arrays(children, fields=list(type_),
                                      mask=pa.array(np.ones(length, bool)))


def _placeholder(type_: pa.DataType, length: int) -> pa.Array:
    if pa.types.is_struct(type_):
        return pa.StructArray.from_arrays([_placeholder(f.type, length) for f in type_],
                                          fields=list(type_))
    if pa.types.is_list(type_) or pa.types.is_map(type_):
        return pa.array([[]] * length, type_)
    return pa.nulls(length, type_).fill_null(False if pa.types.is_boolean(type_) else
                                            "" if pa.types.is_string(type_) else 0)


# -- the cases, each in a fresh process -------------------------------------------------

def fresh_process(case: str, side: int, table: Path, last_append: int,
                  package_root: str = REPO) -> dict:
    command = [sys.executable, str(Path(__file__).with_name("plan_case.py")), case, str(side),
               str(table), str(last_append)]
    # this checkout's package (or --baseline-rev's), not the one the venv has installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def stats_table(workdir: str, files: int, stats: str) -> Path:
    return Path(workdir) / f"files{files}_p{PARTITIONS}_stats-{stats}"


def build_stats_table(path: Path, files: int, stats: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from core_tables import build_stats_table as build

    build(path, files, PARTITIONS, stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--range-files", type=int, default=None,
                        help="files the appends add (default: files/10, at most 100,000)")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="stats-json,stats-struct,snapshot,changes,first")
    parser.add_argument("--drop", action="store_true", help="delete the tables afterwards")
    parser.add_argument("--baseline-rev", default="",
                        help="also plan with the package at this git revision")
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench_plan"))
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    range_files = args.range_files or min(100_000, args.files // 10)
    table = Path(args.workdir) / f"files{args.files}_range{range_files}_c{args.commits}"
    if args.build and args.stats:
        build_stats_table(stats_table(args.workdir, args.files, args.stats), args.files,
                          args.stats)
        return
    if args.build:
        build_log(table, args.files, range_files, args.commits)
        return
    cases = args.cases.split(",")
    tables = {case: stats_table(args.workdir, args.files, STATS_CASES[case])
              if case in STATS_CASES else table for case in cases}
    # Linux keeps ru_maxrss across exec: a child forked from a big parent would report the
    # parent's peak, so the tables are built in a child and this process stays small.
    build = [sys.executable, __file__, "--build", "--files", str(args.files),
             "--range-files", str(range_files), "--commits", str(args.commits),
             "--workdir", args.workdir]
    for stats in dict.fromkeys(STATS_CASES[c] for c in cases if c in STATS_CASES):
        started = time.perf_counter()
        subprocess.run(build + ["--stats", stats], check=True)
        print(f"table of {args.files:,} files (stats: {stats}) ready in "
              f"{time.perf_counter() - started:.1f} s")
    if any(case not in STATS_CASES for case in cases):
        started = time.perf_counter()
        subprocess.run(build, check=True)
        print(f"log of {args.files:,} live files ready in "
              f"{time.perf_counter() - started:.1f} s: {table}")
    last_append = args.commits - DELETE_COMMITS
    # run: (side: 0 ours / 1 theirs, package); run 2 is ours at --baseline-rev
    sides = {0: (0, REPO), 1: (1, REPO)}
    if args.baseline_rev:
        from bench_triggers import package_at

        sides[2] = (0, str(package_at(args.baseline_rev, Path(args.workdir))))
    runs = {(c, s): [] for c in cases for s in sides}
    load_before = os.getloadavg()
    for _ in range(args.repeat):
        for case in cases:
            for run, (side, package) in sides.items():
                runs[case, run].append(fresh_process(case, side, tables[case], last_append,
                                                     package))
    print_summary(args, range_files, runs, cases, load_before)
    if args.drop:
        for path in set(tables.values()):
            shutil.rmtree(path, ignore_errors=True)


def print_summary(args, range_files: int, runs: dict, cases: list[str],
                  load_before: tuple[float, float, float]) -> None:
    print(f"\n== bench_plan: {args.files:,} live files; synthetic log: {args.commits} commits "
          f"(appends add {range_files:,} files); stats-*: deltalake's checkpoint, "
          f"{PARTITIONS} partitions; median of {args.repeat} fresh processes ==")
    for case in cases:
        ours, theirs = runs[case, 0], runs[case, 1]
        ours_s = statistics.median(r["seconds"] for r in ours)
        theirs_s = statistics.median(r["seconds"] for r in theirs)
        ours_cpu = statistics.median(r["cpu_seconds"] for r in ours)
        theirs_cpu = statistics.median(r["cpu_seconds"] for r in theirs)
        ours_rss = max(r["rss_mib"] for r in ours)
        theirs_rss = max(r["rss_mib"] for r in theirs)
        ours_name, theirs_name = CASES[case]
        ours_import = max(r["import_mib"] for r in ours)
        theirs_import = max(r["import_mib"] for r in theirs)
        print(f"{case:12s} {ours_name:33s} {ours_s:7.2f} s (CPU {ours_cpu:5.2f} s)  "
              f"peak RSS {ours_rss:7.0f} MiB (imports {ours_import:4.0f})  "
              f"({ours[0]['count']:,} files)")
        print(f"{'':12s} {theirs_name:33s} {theirs_s:7.2f} s (CPU {theirs_cpu:5.2f} s)  "
              f"peak RSS {theirs_rss:7.0f} MiB (imports {theirs_import:4.0f})  "
              f"({theirs[0]['count']:,} rows)")
        print(f"{'':12s} ratio {ours_s / theirs_s:.2f}x time, {ours_cpu / theirs_cpu:.2f}x CPU, "
              f"{ours_rss / theirs_rss:.2f}x RSS")
        if (case, 2) in runs:
            base = runs[case, 2]
            base_s = statistics.median(r["seconds"] for r in base)
            base_cpu = statistics.median(r["cpu_seconds"] for r in base)
            base_rss = max(r["rss_mib"] for r in base)
            print(f"{'':12s} {ours_name + ' at ' + args.baseline_rev[:9]:33s} {base_s:7.2f} s "
                  f"(CPU {base_cpu:5.2f} s)  peak RSS {base_rss:7.0f} MiB: ratio to the "
                  f"baseline {base_s / theirs_s:.2f}x time, {base_cpu / theirs_cpu:.2f}x CPU, "
                  f"{base_rss / theirs_rss:.2f}x RSS")
    after = os.getloadavg()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in load_before)}, after: "
          f"{' '.join(f'{v:.2f}' for v in after)} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
