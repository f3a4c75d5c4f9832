"""Benchmark of a DeltaVersionSensor poke, next to deltalake, side by side in one run.

One poke of ``DeltaVersionSensor`` (watermark two versions below the head, so the poke
succeeds and reads the head commit's timestamp) on tables of 100 and 100,000 commits
(checkpoint every 10 commits), next to ``deltalake.DeltaTable(uri).version()`` on the same
tables. Goals: the 100k/100 ratio of the poke stays <= 1.5; the factor by which the poke
beats deltalake is printed per size.

It also times a poke that finds nothing new just after ``_delta_log`` changed: a local
folder is then listed once (to tell a hole in the log from its head), later idle pokes are a
``stat``.

The watermark comes from a fixed in-memory store so that only the table-side cost is
measured (reading an XCom or Variable costs the same whatever the table's size). The same
poke is then measured on S3 copies of the logs (a local moto server; ``--s3-sizes``, default
100 and 10,000 commits, '' to skip; uploading takes a while).

Then a data-change-only poke (``data_changes_only=True``) on tables of 100 and 100,000
commits (``--data-change-sizes``) whose newest commits are an OPTIMIZE, a VACUUM (two
commits) and a property change, the watermark just below them: first with nothing else new
(the sensor keeps waiting), then after an append (it succeeds, from the watermark to the
append). Each measured poke reads the new commits again (a fresh task run's probe has not
read them; within one run the probe reads each commit once). Goal: the 100k/100 ratio stays
<= 1.2, since a poke reads only the commits after the watermark. These tables are written as
JSON files with one checkpoint, in a temporary folder deleted afterwards.

Run: ``.venv/bin/python benchmarks/bench_sensor.py [--sizes 100,100000] [--repeat 50]
[--s3-sizes 100,10000] [--data-change-sizes 100,100000] [--only-data-changes]
[--workdir DIR]``. Tables are generated once into ``--workdir`` and reused (shared with
bench_core.py); the 100,000-commit table takes about a minute to write.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import median_seconds, print_side_by_side  # noqa: E402
from core_s3 import moto_s3_logs  # noqa: E402
from core_tables import (  # noqa: E402
    MAINTENANCE, append_data_commit, build_maintained_table, build_table,
)
from deltalake import DeltaTable  # noqa: E402

from airflow_provider_delta.sensors import DeltaVersionSensor  # noqa: E402
from airflow_provider_delta.watermarks import WatermarkStore  # noqa: E402

NEW_VERSIONS = 2


class FixedWatermark(WatermarkStore):
    """A watermark that never moves: each poke sees the same new versions."""

    def __init__(self, table_uri: str, version: int):
        super().__init__(key="bench", table_uri=table_uri)
        self.version = version

    def where(self, context) -> str:
        return "the benchmark"

    def _get(self, context) -> int:
        return self.version

    def _put(self, context, value) -> None:
        raise NotImplementedError("the benchmark never advances its watermark")


def poking_sensor(uri: str, commits: int,
                  storage_options: dict[str, str] | None = None) -> DeltaVersionSensor:
    sensor = DeltaVersionSensor(task_id=f"sense_{commits}", table_uri=uri,
                                watermark_store="variable")
    sensor.store = FixedWatermark(uri, commits - 1 - NEW_VERSIONS)
    sensor.storage_options = storage_options  # what DeltaHook would give from a connection
    found = sensor.poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (commits - NEW_VERSIONS, commits - 1)
    return sensor


def bench_pokes(uris: dict[int, str], repeat: int,
                storage_options: dict[str, str] | None = None) -> dict[int, tuple[float, float]]:
    """Median poke time and DeltaTable().version() time per table size."""
    sensors = {n: poking_sensor(uri, n, storage_options) for n, uri in uris.items()}
    ours = median_seconds({n: (lambda s=s: s.poke({})) for n, s in sensors.items()}, repeat)
    first = median_seconds(
        {n: (lambda u=u, n=n: poking_sensor(u, n, storage_options)) for n, u in uris.items()},
        max(3, repeat // 10),
    )
    for commits, seconds in first.items():
        print(f"  first poke of a task run (opens the store, checks the protocol), {commits} "
              f"commits: {seconds * 1e3:.1f} ms")
    theirs = median_seconds(
        {n: (lambda u=u: DeltaTable(u, storage_options=storage_options).version())
         for n, u in uris.items()},
        max(3, repeat // 10),
    )
    return {n: (ours[n], theirs[n]) for n in uris}


def bench_idle_pokes_after_a_change(tables: dict[int, Path], repeat: int) -> dict[int, float]:
    """A poke that finds nothing new just after ``_delta_log`` changed (e.g. a checkpoint was
    written): a local folder is then listed once to tell a hole from the head."""
    sensors = {}
    for commits, path in tables.items():
        sensor = DeltaVersionSensor(task_id=f"idle_{commits}", table_uri=str(path),
                                    watermark_store="variable")
        sensor.store = FixedWatermark(str(path), commits - 1)
        sensors[commits] = sensor

    def poke_after_change(commits: int) -> None:
        os.utime(tables[commits] / "_delta_log")  # a new mtime, as any new entry gives
        assert sensors[commits].poke({}) is False

    return median_seconds({n: (lambda n=n: poke_after_change(n)) for n in tables},
                          max(3, repeat // 5))


def bench_s3_pokes(tables: dict[int, Path], repeat: int) -> dict[int, tuple[float, float]]:
    with moto_s3_logs(tables) as (options, uris):
        return bench_pokes(uris, repeat, options)


def bench_data_change_pokes(tables: dict[int, Path], repeat: int
                            ) -> dict[int, tuple[float, float]]:
    """Median data-change-only poke per table size: with only maintenance commits after the
    watermark, and after an append."""
    sensors = {}
    for commits, path in tables.items():
        sensor = DeltaVersionSensor(task_id=f"data_{commits}", table_uri=str(path),
                                    watermark_store="variable", data_changes_only=True)
        sensor.store = FixedWatermark(str(path), commits - 1 - len(MAINTENANCE))
        sensors[commits] = sensor

    def poke(commits: int, waking: bool) -> None:
        sensor = sensors[commits]
        sensor.probe._changes_data.clear()  # as a fresh task run: the new commits are unread
        found = sensor.poke({})
        assert (found is not False) == waking, found
        if waking:
            assert found.xcom_value["end_version"] == commits

    def pokes(waking: bool) -> dict[int, float]:
        time.sleep(2.1)  # the folder settles: later pokes stat it instead of listing it
        return median_seconds({n: (lambda n=n: poke(n, waking)) for n in tables}, repeat)

    sleeping = pokes(waking=False)
    for commits, path in tables.items():
        append_data_commit(path, commits)
    waking = pokes(waking=True)
    return {n: (sleeping[n], waking[n]) for n in tables}


def run_data_change_pokes(sizes: list[int], repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-data-changes-") as folder:
        tables = {}
        for commits in sizes:
            started = time.perf_counter()
            tables[commits] = build_maintained_table(Path(folder) / f"commits-{commits}", commits)
            print(f"maintained table of {commits:>7} commits ready in "
                  f"{time.perf_counter() - started:6.1f} s")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print_side_by_side(
            f"DeltaVersionSensor.poke(data_changes_only=True), local: {len(MAINTENANCE)} "
            f"commits without data after the watermark ({', '.join(MAINTENANCE)})",
            bench_data_change_pokes(tables, repeat), " (goal <= 1.2)",
            columns=("keeps waiting", "after an append"))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def print_results(title: str, results: dict[int, tuple[float, float]]) -> None:
    print_side_by_side(title, results, " (goal <= 1.5)")
    for commits, (poke, version) in results.items():
        print(f"  {commits:>9} commits: the poke is {version / poke:,.1f}x faster than deltalake")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,100000", help="commit counts of the tables")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "core-bench-tables"))
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--s3-sizes", default="100,10000",
                        help="commit counts of the S3 tables ('' to skip)")
    parser.add_argument("--data-change-sizes", default="100,100000",
                        help="commit counts of the data-change-only tables ('' to skip)")
    parser.add_argument("--only-data-changes", action="store_true",
                        help="run only the data-change-only pokes")
    args = parser.parse_args()
    logging.getLogger("airflow_provider_delta").setLevel(logging.WARNING)  # one line per poke
    data_change_sizes = sorted(int(s) for s in args.data_change_sizes.split(",") if s)
    if args.only_data_changes:
        run_data_change_pokes(data_change_sizes, args.repeat)
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    tables = {}
    for commits in sizes:
        started = time.perf_counter()
        tables[commits] = build_table(Path(args.workdir) / f"commits-{commits}", commits)
        print(f"table of {commits:>7} commits ready in {time.perf_counter() - started:6.1f} s")

    print_results(
        f"DeltaVersionSensor.poke (watermark {NEW_VERSIONS} below the head), local; "
        "deltalake: DeltaTable().version()",
        bench_pokes({n: str(path) for n, path in tables.items()}, args.repeat),
    )
    idle = bench_idle_pokes_after_a_change(tables, args.repeat)
    print("\nthe same with nothing new, just after _delta_log changed (one listing of the folder)")
    for commits, seconds in idle.items():
        print(f"  {commits:>9} commits: {seconds * 1e3:.1f} ms")
    s3_sizes = sorted(int(s) for s in args.s3_sizes.split(",") if s)
    if s3_sizes:
        s3_tables = {n: build_table(Path(args.workdir) / f"commits-{n}", n) for n in s3_sizes}
        print_results("the same on S3 (moto server)", bench_s3_pokes(s3_tables, args.repeat))
    if data_change_sizes:
        run_data_change_pokes(data_change_sizes, args.repeat)


if __name__ == "__main__":
    main()
