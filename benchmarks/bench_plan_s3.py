"""Plans of bench_plan.py's million-file tables from S3: time, peak memory and requests.

The ``stats-*`` tables of ``bench_plan.py`` (deltalake's checkpoint of ``--files`` AddFiles)
are put into a moto S3 server running in its own process on 127.0.0.1, and each side plans
the snapshot in a fresh process (``plan_case.py``) through a proxy that counts the requests
by method: our ``plan_snapshot``, the same at ``--baseline-rev`` (e.g. before a change), and
with ``--deltalake`` deltalake's ``get_add_actions(flatten=True)``. Medians of ``--repeat``
processes a side, interleaved; peak RSS is the process's ``VmHWM``. ``--baseline-rev`` takes
several revisions, comma-separated (e.g. two ways of one change beside the code before).

Run: ``.venv/bin/python benchmarks/bench_plan_s3.py --files 1000000 --repeat 2
--cases stats-json,stats-struct --baseline-rev REV``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]

from bench_plan import STATS_CASES, stats_table  # noqa: E402
from core_s3 import new_bucket, upload_log  # noqa: E402
from tests.moto_s3 import counted_requests  # noqa: E402

BUCKET = "bench"
SIDES = {0: "plan_snapshot", 1: "deltalake get_add_actions"}  # 2, 3, ...: at --baseline-rev


def moto_process() -> tuple[subprocess.Popen, dict[str, str]]:
    """moto's server in a process of its own (its memory is not the planner's)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, new_bucket(f"http://127.0.0.1:{port}", BUCKET)


def plan_on_s3(case: str, side: int, uri: str, options: dict[str, str], package: Path
               ) -> dict:
    with counted_requests(options) as (counted, requests):
        env = dict(os.environ, BENCH_STORAGE_OPTIONS=json.dumps(counted),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(package),
                                                            os.environ.get("PYTHONPATH")])))
        command = [sys.executable, str(REPO / "benchmarks" / "plan_case.py"), case,
                   str(min(side, 1)), uri, "0"]
        out = subprocess.run(command, check=True, capture_output=True, text=True,
                             env=env).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["requests"] = dict(sorted(requests.items()))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cases", default="stats-json,stats-struct")
    parser.add_argument("--baseline-rev", default="")
    parser.add_argument("--deltalake", action="store_true", help="plan with deltalake too")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench_plan"))
    args = parser.parse_args()
    cases = args.cases.split(",")
    build = [sys.executable, str(REPO / "benchmarks" / "bench_plan.py"), "--build",
             "--files", str(args.files), "--workdir", args.workdir]
    for case in cases:  # in a child: this process stays small
        subprocess.run(build + ["--stats", STATS_CASES[case]], check=True)
    sides = {0: REPO} | ({1: REPO} if args.deltalake else {})
    revisions = dict(enumerate(filter(None, args.baseline_rev.split(",")), start=2))
    if revisions:
        from bench_triggers import package_at

        sides |= {side: package_at(rev, Path(args.workdir)) for side, rev in revisions.items()}
    server, options = moto_process()
    try:
        uris = {case: upload_log(stats_table(args.workdir, args.files, STATS_CASES[case]),
                                 f"s3://{BUCKET}/{case}", options) for case in cases}
        load_before = os.getloadavg()
        runs = {(case, side): [] for case in cases for side in sides}
        for _ in range(args.repeat):
            for case in cases:
                for side, package in sides.items():
                    runs[case, side].append(plan_on_s3(case, side, uris[case], options,
                                                       package))
        load_after = os.getloadavg()
    finally:
        server.kill()
        server.wait()
    print(f"\n== bench_plan_s3: {args.files:,} files, deltalake's checkpoint on moto S3; "
          f"median of {args.repeat} fresh processes ==")
    for case in cases:
        for side in sides:
            done = runs[case, side]
            name = SIDES.get(side, f"plan_snapshot at {revisions.get(side, '')[:9]}")
            print(f"{case:12s} {name:34s} {statistics.median(r['seconds'] for r in done):6.2f} s"
                  f" (CPU {statistics.median(r['cpu_seconds'] for r in done):5.2f} s)  peak RSS "
                  f"{max(r['rss_mib'] for r in done):6.0f} MiB  requests {done[-1]['requests']}"
                  f"  ({done[-1]['count']:,} files)")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in load_before)}, after: "
          f"{' '.join(f'{v:.2f}' for v in load_after)} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
