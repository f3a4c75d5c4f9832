"""Benchmark of the log core against deltalake, side by side in one run.

1. ``latest_version(uri, since=previous)`` on tables of 100, 10,000 and 100,000 commits
   (checkpoint every 10 commits), next to ``deltalake.DeltaTable(uri).version()``. Goal:
   the 100k/100 ratio of ``latest_version`` stays <= 1.5.
2. ``plan_changes`` over the 1,000 newest commits of a 1,000-commit and of a
   100,000-commit table. Goal: ratio <= 1.2, each under 1 s.
3. The same ``latest_version`` on S3 (a local moto server), where the hint becomes a
   start-after listing (``--s3-sizes``, default 100 and 10,000 commits; uploading takes a while).
4. ``plan_snapshot`` of a table of 100,000 live files (one deltalake checkpoint), next to
   ``DeltaTable(uri).get_add_actions()``, which lists the same files but without their
   deletion-vector descriptors.

Run: ``.venv/bin/python benchmarks/bench_core.py [--sizes 100,10000,100000]
[--snapshot-files 100000] [--workdir DIR]``.
Tables are generated once into ``--workdir`` and reused (see core_tables.py); the
100,000-commit table takes about a minute to write.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_s3 import moto_s3_logs  # noqa: E402
from core_s3 import upload_log as _upload_log  # noqa: E402,F401 (bench_sensor imports it)
from core_tables import build_table, build_wide_table  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from airflow_provider_delta.core import latest_version, plan_changes, plan_snapshot  # noqa: E402

PLAN_WINDOW = 1000


def median_seconds(actions: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each action over ``repeat`` rounds after a warm-up round.

    The actions run interleaved, round by round, so that load from other processes on the
    machine weighs on all of them alike.
    """
    timings: dict[str, list[float]] = {name: [] for name in actions}
    for round_number in range(repeat + 1):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            if round_number:
                timings[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in timings.items()}


def bench_latest_version(tables: dict[int, Path], repeat: int) -> dict[int, tuple[float, float]]:
    for commits, path in tables.items():
        assert latest_version(str(path), since=commits - 2) == DeltaTable(str(path)).version()
    ours = median_seconds({n: _latest(p, n) for n, p in tables.items()}, repeat)
    theirs = median_seconds({n: _deltalake_version(p) for n, p in tables.items()},
                            max(3, repeat // 10))
    return {n: (ours[n], theirs[n]) for n in tables}


def _latest(path: Path, commits: int) -> Callable[[], int]:
    return lambda: latest_version(str(path), since=commits - 2)


def _deltalake_version(path: Path) -> Callable[[], int]:
    return lambda: DeltaTable(str(path)).version()


def bench_plan_changes(tables: dict[int, Path], repeat: int) -> dict[int, float]:
    for commits, path in tables.items():
        plan = _plan(path, commits)()
        assert len(plan) == PLAN_WINDOW and plan.end_version == commits - 1
    return median_seconds({n: _plan(p, n) for n, p in tables.items()}, repeat)


def _plan(path: Path, commits: int) -> Callable[[], object]:
    # The benchmark tables are overwrites: every commit removes the previous file.
    return lambda: plan_changes(str(path), commits - PLAN_WINDOW, ignore_changes=True)


def bench_s3_latest_version(tables: dict[int, Path], repeat: int
                            ) -> dict[int, tuple[float, float]]:
    """latest_version(since=previous) and deltalake's version() on S3 copies of the logs.

    The server is moto: its start-after listing filters every key of the bucket in Python,
    so even a start-after request costs more on a bigger log there (S3 itself seeks).
    """
    with moto_s3_logs(tables) as (options, uris):
        for commits, uri in uris.items():
            assert latest_version(uri, since=commits - 2, storage_options=options) == commits - 1
        ours = median_seconds({n: _remote_latest(uri, n, options) for n, uri in uris.items()},
                              repeat)
        theirs = median_seconds({n: _remote_deltalake(uri, options) for n, uri in uris.items()},
                                max(3, repeat // 10))
    return {n: (ours[n], theirs[n]) for n in uris}


def _remote_latest(uri: str, commits: int, options: dict[str, str]) -> Callable[[], int]:
    return lambda: latest_version(uri, since=commits - 2, storage_options=options)


def _remote_deltalake(uri: str, options: dict[str, str]) -> Callable[[], int]:
    return lambda: DeltaTable(uri, storage_options=options).version()


def bench_snapshot(path: Path, files: int, repeat: int) -> dict[str, float]:
    assert len(plan_snapshot(str(path))) == files + 1
    return median_seconds({
        "ours": lambda: plan_snapshot(str(path)),
        "deltalake": lambda: DeltaTable(str(path)).get_add_actions(flatten=True),
    }, repeat)


def print_side_by_side(title: str, results: dict[int, tuple[float, float]], goal: str = "",
                       columns: tuple[str, str] = ("ours", "deltalake")) -> None:
    """Milliseconds per table size, in two columns (ours next to deltalake, unless named
    otherwise), and the largest/smallest ratios (``goal`` follows the first)."""
    first, second = (f"{name} (ms)" for name in columns)
    print(f"\n{title}\n  {'commits':>9}   {first:>9}   {second:>14}")
    for commits, (ours, theirs) in results.items():
        print(f"  {commits:>9}   {ours * 1e3:{len(first)}.3f}   {theirs * 1e3:{max(len(second), 14)}.3f}")
    small, large = min(results), max(results)
    print(f"  ratio {large}/{small}: {columns[0]} {results[large][0] / results[small][0]:.2f}"
          f"{goal}, {columns[1]} {results[large][1] / results[small][1]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000",
                        help="commit counts of the latest_version tables")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "core-bench-tables"))
    parser.add_argument("--s3-sizes", default="100,10000",
                        help="commit counts of the S3 tables ('' to skip)")
    parser.add_argument("--snapshot-files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    workdir = Path(args.workdir)
    plan_sizes = sorted({PLAN_WINDOW, sizes[-1]})
    tables = {}
    for commits in sorted(set(sizes) | set(plan_sizes)):
        started = time.perf_counter()
        tables[commits] = build_table(workdir / f"commits-{commits}", commits)
        print(f"table of {commits:>7} commits ready in {time.perf_counter() - started:6.1f} s")

    latest = bench_latest_version({n: tables[n] for n in sizes}, args.repeat)
    print_side_by_side("latest_version(since=previous), local; deltalake: DeltaTable().version()",
                       latest, " (goal <= 1.5)")

    planned = bench_plan_changes({n: tables[n] for n in plan_sizes}, max(5, args.repeat // 4))
    print(f"\nplan_changes over the newest {PLAN_WINDOW} commits   (ms)")
    for commits, seconds in planned.items():
        print(f"  {commits:>7}-commit table              {seconds * 1e3:9.1f}")
    low, high = plan_sizes[0], plan_sizes[-1]
    print(f"  ratio {high}/{low}: {planned[high] / planned[low]:.2f} (goal <= 1.2, each < 1000 ms)")

    s3_sizes = sorted(int(s) for s in args.s3_sizes.split(",") if s)
    if s3_sizes:
        remote = bench_s3_latest_version(
            {n: build_table(workdir / f"commits-{n}", n) for n in s3_sizes}, args.repeat)
        print_side_by_side("the same on S3 (moto server)", remote)

    wide = build_wide_table(workdir / f"files-{args.snapshot_files}", args.snapshot_files)
    snapshot = bench_snapshot(wide, args.snapshot_files, 3)
    print(f"\nplan_snapshot of {args.snapshot_files} files   ours {snapshot['ours'] * 1e3:.0f} ms, "
          f"deltalake get_add_actions {snapshot['deltalake'] * 1e3:.0f} ms "
          f"(ratio {snapshot['ours'] / snapshot['deltalake']:.1f})")


if __name__ == "__main__":
    main()
