"""Change feed benchmark: read_change_feed against Spark's own read of the same files, and a
merge load against a full reload of the target.

1. The feed at Spark's floor. Per case, a table of ``--rows`` rows in ``--commits`` appends
   (one file each), then one commit changing 1% of the rows: ``--layout clustered`` the
   newest ids (the last append's file is rewritten), ``--layout spread`` every hundredth id
   (every file is):

   * ``cdf-on``: the Change Data Feed on, the change an UPDATE (deltalake writes cdc files);
   * ``cdf-off``: no Change Data Feed, the change a copy-on-write DELETE (deltalake rewrites
     the files, no deletion vectors), which the feed nets (the rewritten files' rows against
     the removed files' rows);
   * ``row-tracking`` and ``row-tracking-update``: no Change Data Feed, row tracking on (written
     by delta-spark, ``row_tracking_table.py``, with the Python of ``.venv-delta-spark`` or
     ``$DELTA_SPARK_PYTHON``), the change a copy-on-write DELETE or UPDATE, which the feed
     pairs by row id.

   ``read_change_feed`` of the whole range (the appends and the change) into Spark's ``noop``
   sink, against Spark's floor: ``spark.read.parquet`` of the files the feed reads (the
   appends' adds, the change's cdc files, or its added and removed files), taken from the log,
   into the same sink. Goals: CDF on <= 1.3x, CDF off <= 1.8x, row tracking <= 1.3x.
   ``--layout appends`` leaves the change out (the feed of the appends alone: the earlier
   layout, goal <= 1.5x).

   Each revision measures in a child process of its own (a fresh local Spark session, warm-up
   of each side, then ``--repeat`` runs with the sides alternating); best and median wall
   times and the best CPU times (Spark's JVM and the child, all threads) are printed with
   ``uptime``. ``--baseline-rev REV`` measures the same tables also with the package at
   ``REV`` (git archive). Each revision runs ``--children`` children (default 2), taking
   turns with the other's (this, base, base, this): a load that moves during the run reaches
   both, and each revision's best and median are over all its children's runs.
2. A target of ``--rows`` rows in ``--files`` files clustered by key (as after OPTIMIZE or
   Z-order) gets one source commit that updates 1% of the rows, applied with the driver's
   ``run_job`` (``change_feed=True``, ``delta-merge`` sink), against rewriting the whole
   target from the source snapshot with ``run_job`` (``delta`` sink). Two cases: the changed
   keys are the most recent ones (clustered), or every hundredth key (spread over all files).
   Goal: speed-up >= 10 on the clustered case. Each side is a whole ``run_job`` in the warm
   session: planning from the source's log, the target's checks and txn check, reading the
   rows (the merge's small feed on the driver with Arrow; the rewrite's 1M rows with Spark),
   and the write and commit (deltalake's MERGE; Spark's Parquet write and a deltalake commit).

Usage: ``PYTHONPATH=. python benchmarks/bench_change_feed.py [--rows 1000000,10000000]
[--commits 10] [--cases cdf-on,cdf-off,row-tracking,row-tracking-update] [--layout
clustered|spread|appends] [--baseline-rev REV] [--children 2] [--repeat 3] [--part
feed|merge|both] [--files 40]``. Tables are written with ``deltalake`` (row tracking: delta-spark) into a temp folder and
deleted after each size.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from bench_spark_reader import local_spark, noop_write, timed_pair
from bench_triggers import package_at
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import LoadStart
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


def changed_rows(layout: str, rows: int) -> str | None:
    """The predicate of the layout's change: 1% of the rows, the newest (in the last append's
    file) or every hundredth (in every file); None for the appends alone."""
    return {"clustered": f"id >= {rows - rows // 100}", "spread": "id % 100 = 7"}.get(layout)


def cdf_on_case(path: str, rows: int, commits: int, changed: str | None) -> None:
    """Appends with the Change Data Feed on, then one UPDATE of 1% of the rows (deltalake
    writes cdc files for it)."""
    write_clustered(path, rows, commits, _CDF_ON)
    if changed:
        DeltaTable(path).update(updates={"label": "'changed'"}, predicate=changed)


def cdf_off_case(path: str, rows: int, commits: int, changed: str | None) -> None:
    """Appends without the Change Data Feed, then one copy-on-write DELETE of 1% of the rows
    (deltalake rewrites the files, no deletion vectors)."""
    write_clustered(path, rows, commits)
    if changed:
        DeltaTable(path).delete(changed)


def row_tracking_case(change: str) -> Callable[[str, int, int, str | None], None]:
    """Appends with row tracking on, then a copy-on-write ``change`` (``delete`` or
    ``update``) of the ``changed`` rows, written by delta-spark in its own venv."""
    def write(path: str, rows: int, commits: int, changed: str | None) -> None:
        root = Path(__file__).resolve().parent.parent
        python = os.environ.get("DELTA_SPARK_PYTHON",
                                str(root / ".venv-delta-spark" / "bin" / "python"))
        where = ["--change", change, "--where", changed] if changed else []
        subprocess.run([python, str(root / "benchmarks" / "row_tracking_table.py"), path,
                        str(rows), str(commits), *where], cwd=root, check=True,
                       capture_output=True)
    return write


# case name -> writer of its table: ``(path, rows, commits, changed)``, ``changed`` the SQL
# predicate of the rows the last commit changes (None: no such commit)
FEED_CASES: dict[str, Callable[[str, int, int, str | None], None]] = {
    "cdf-on": cdf_on_case, "cdf-off": cdf_off_case,
    "row-tracking": row_tracking_case("delete"),
    "row-tracking-update": row_tracking_case("update"),
}
DEFAULT_CASES = ("cdf-on", "cdf-off", "row-tracking")


def floor_paths(path: str, end: int) -> list[str]:
    """The files a change feed of versions 0..``end`` reads, from the log: per commit its cdc
    files, else its data-changing adds and removes. Independent of the package, so that a
    baseline revision meets the same floor."""
    paths = []
    for version in range(end + 1):
        with open(Path(path, "_delta_log", f"{version:020}.json")) as commit:
            actions = [json.loads(line) for line in commit if line.strip()]
        cdc = [action["cdc"]["path"] for action in actions if "cdc" in action]
        files = cdc or [action[kind]["path"] for action in actions for kind in ("add", "remove")
                        if kind in action and action[kind].get("dataChange", True)]
        paths += [str(Path(path, unquote(file))) for file in files]
    return paths


def measure_feeds(tables: list[dict], repeat: int) -> None:
    """Each table's feed against its floor in one warm session, one JSON line per table (run
    in a child process whose PYTHONPATH chooses the package's revision)."""
    spark = local_spark()
    clock = CpuClock(spark)
    for table in tables:
        path, end = table["path"], table["end"]
        paths = floor_paths(path, end)
        ours = noop_write(lambda: read_change_feed(spark, path, 0, end))
        floor = noop_write(lambda: spark.read.parquet(*paths))
        first = timed(ours)
        runs = side_by_side(clock, {"ours": ours, "floor": floor}, repeat)
        print(json.dumps({**table, "first": first, "files": len(paths), **runs}), flush=True)
    spark.stop()


def side_by_side(clock: CpuClock, sides: dict[str, Callable[[], object]], repeat: int
                 ) -> dict[str, list[tuple[float, float | None]]]:
    """(wall, CPU) seconds of each side's runs, the sides alternating after one warm-up each."""
    for action in sides.values():
        action()
    spent: dict[str, list[tuple[float, float | None]]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, action in sides.items():
            cpu, start = clock(), time.perf_counter()
            action()
            wall, cpu_end = time.perf_counter() - start, clock()
            spent[name].append((wall, None if cpu is None else cpu_end - cpu))
    return spent


def bench_feed(work: Path, args: argparse.Namespace) -> None:
    """Per size, every case's table written once, then measured by each revision's child."""
    revisions = {"this": Path(__file__).resolve().parent.parent}
    if args.baseline_rev:
        revisions[args.baseline_rev] = package_at(args.baseline_rev, work)
    for rows in args.rows:
        tables = []
        for case in args.cases:
            path = str(work / f"feed-{case}-{rows}")
            FEED_CASES[case](path, rows, args.commits, changed_rows(args.layout, rows))
            tables.append({"case": case, "rows": rows, "path": path,
                           "end": DeltaTable(path).version()})
        for result in alternating_children(revisions, tables, args):
            print_feed(result["revision"], result)
        for table in tables:
            shutil.rmtree(table["path"], ignore_errors=True)
    print(f"uptime: {uptime()}")


def alternating_children(revisions: dict[str, Path], tables: list[dict],
                         args: argparse.Namespace) -> list[dict]:
    """Each revision's runs from ``--children`` children of its own, the revisions taking
    turns (this, base, base, this, ...), so that a load moving during the run reaches both;
    per revision and table the children's runs together (their best and median)."""
    merged: dict[tuple[str, str], dict] = {}
    for turn in range(args.children):
        order = list(revisions.items())
        for label, root in order if turn % 2 == 0 else reversed(order):
            print(f"uptime: {uptime()}", flush=True)
            for result in run_measure(root, tables, args.repeat):
                key = (label, result["case"])
                if key in merged:
                    for side in ("ours", "floor"):
                        merged[key][side] += result[side]
                else:
                    merged[key] = {**result, "revision": label}
    return list(merged.values())


def run_measure(root: Path, tables: list[dict], repeat: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, "--measure", json.dumps(tables),
                           "--repeat", str(repeat)], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the measuring child failed:\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def print_feed(label: str, result: dict) -> None:
    ours, floor = result["ours"], result["floor"]
    wall = [min(w for w, _ in ours), statistics.median(w for w, _ in ours),
            min(w for w, _ in floor), statistics.median(w for w, _ in floor)]
    cpu = "" if ours[0][1] is None else (
        f"; CPU best {min(c for _, c in ours):.2f} s vs {min(c for _, c in floor):.2f} s, "
        f"{min(c for _, c in ours) / min(c for _, c in floor):.2f}x")
    print(f"{result['rows']:>9,} rows {result['case']:<8} {label:<8} ours best {wall[0]:.3f} s "
          f"(median {wall[1]:.3f}), floor best {wall[2]:.3f} s (median {wall[3]:.3f}) of "
          f"{result['files']} files: ratio best {wall[0] / wall[2]:.2f}x, median "
          f"{wall[1] / wall[3]:.2f}x{cpu}; first call {result['first']:.2f} s", flush=True)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


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
    parser.add_argument("--rows", type=lambda text: [int(n) for n in text.split(",")],
                        default=[1_000_000], help="comma-separated sizes (the feed)")
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=("feed", "merge", "both"), default="feed")
    parser.add_argument("--layout", choices=("clustered", "spread", "appends"),
                        default="clustered")
    parser.add_argument("--cases", type=lambda text: text.split(","), default=list(DEFAULT_CASES))
    parser.add_argument("--baseline-rev", default="")
    parser.add_argument("--children", type=int, default=2,
                        help="children per revision, taking turns with the other revision's")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a child's tables, as JSON
    args = parser.parse_args()
    if args.measure:
        measure_feeds(json.loads(args.measure), args.repeat)
        return

    work = Path(tempfile.mkdtemp(prefix="bench-change-feed-"))
    try:
        if args.part != "merge":
            bench_feed(work, args)
        if args.part != "feed":
            spark = local_spark()
            bench_merge(spark, work, args.rows[0], args.files, args.repeat)
            print(f"uptime: {uptime()}")
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
