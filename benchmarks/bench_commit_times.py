"""Benchmark of resolving a time interval to versions (core.commit_times), by history length.

Two searches for the versions of an interval near the head, on histories of 100 and 100,000
commits, side by side with a baseline:

* file times (bench_core's tables, a checkpoint every 10 commits): ``versions_between`` lists
  the log once with modification times (no commit is read) and replays the head's metadata;
  baseline: deltalake's time travel to the interval's start (``load_as_version(datetime)``),
  which also has to find the version by file times;
* in-commit timestamps (a log of ``commitInfo``-only commits written here): the binary search
  of ``CommitClock.versions_between`` alone (the table's configuration given, so the head's
  replay is not timed), with the commits it reads counted; baseline: the same search with the
  ICT enablement set to the head, i.e. by listed file times.

Run: ``.venv/bin/python benchmarks/bench_commit_times.py [--sizes 100,100000] [--repeat 10]
[--workdir DIR]``. Say the load average (printed) next to any figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import median_seconds, print_side_by_side  # noqa: E402
from core_tables import build_table  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from airflow_provider_delta.core.commit_times import CommitClock, versions_between  # noqa: E402
from airflow_provider_delta.core.delta_log import TableLocation  # noqa: E402

T0_MS = 1_700_000_000_000
STEP_MS = 60_000  # a commit a minute


def time_commits(path: Path, commits: int) -> None:
    """Commit ``v`` filed at T0 + v minutes (set once: a second run finds them set)."""
    log = path / "_delta_log"
    if os.stat(log / f"{commits - 1:020d}.json").st_mtime_ns == (T0_MS + (commits - 1) * STEP_MS) * 10**6:
        return
    for version in range(commits):
        moment = (T0_MS + version * STEP_MS) * 10**6
        os.utime(log / f"{version:020d}.json", ns=(moment, moment))


def build_ict_log(path: Path, commits: int) -> Path:
    """A ``_delta_log`` of ``commitInfo``-only commits, ICT = T0 + v minutes."""
    log = path / "_delta_log"
    if (log / f"{commits - 1:020d}.json").exists():
        return path
    log.mkdir(parents=True, exist_ok=True)
    for version in range(commits):
        info = {"commitInfo": {"inCommitTimestamp": T0_MS + version * STEP_MS}}
        (log / f"{version:020d}.json").write_text(json.dumps(info) + "\n")
    return path


class CountingLocation(TableLocation):
    reads = 0

    def read_log_file(self, name):
        CountingLocation.reads += 1
        return super().read_log_file(name)


def ict_search(path: Path, commits: int, ict_from: int) -> tuple[int, int] | None:
    config = {"delta.enableInCommitTimestamps": "true",
              "delta.inCommitTimestampEnablementVersion": str(ict_from)}
    clock = CommitClock(CountingLocation(str(path)), commits - 1, config)
    start = T0_MS + (commits - 10) * STEP_MS
    return clock.versions_between(start, start + 5 * STEP_MS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,100000")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "core-bench-tables"))
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    files, icts = {}, {}
    for commits in sizes:
        started = time.perf_counter()
        files[commits] = build_table(Path(args.workdir) / f"commits-{commits}", commits)
        time_commits(files[commits], commits)
        icts[commits] = build_ict_log(Path(args.workdir) / f"ict-commits-{commits}", commits)
        print(f"tables of {commits:>7} commits ready in {time.perf_counter() - started:6.1f} s")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def interval(commits: int) -> tuple[int, int]:
        start = T0_MS + (commits - 10) * STEP_MS
        return start, start + 5 * STEP_MS

    for commits, path in files.items():
        assert versions_between(str(path), *interval(commits)) == (commits - 10, commits - 6)
    ours = median_seconds({n: (lambda p=p, n=n: versions_between(str(p), *interval(n)))
                           for n, p in files.items()}, args.repeat)
    moment = {n: datetime.fromtimestamp(interval(n)[0] / 1000, timezone.utc) for n in files}
    theirs = median_seconds({n: (lambda p=p, n=n: DeltaTable(str(p)).load_as_version(moment[n]))
                             for n, p in files.items()}, args.repeat)
    print_side_by_side("versions_between by file times (list with mtimes + head replay) vs "
                       "deltalake load_as_version(datetime)",
                       {n: (ours[n], theirs[n]) for n in files})

    for commits, path in icts.items():
        CountingLocation.reads = 0
        assert ict_search(path, commits, 0) == (commits - 10, commits - 6)
        print(f"  ICT search, {commits:>7} commits: {CountingLocation.reads} commit reads")
    ict = median_seconds({n: (lambda p=p, n=n: ict_search(p, n, 0)) for n, p in icts.items()},
                         args.repeat)
    listed = median_seconds({n: (lambda p=p, n=n: ict_search(p, n, n - 1))
                             for n, p in icts.items()}, args.repeat)
    print_side_by_side("CommitClock.versions_between by ICT binary search (ours) vs by listed "
                       "file times (the 'deltalake' column here)",
                       {n: (ict[n], listed[n]) for n in icts})
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
