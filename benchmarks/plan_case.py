"""One case of bench_plan.py, run as a fresh process that imports only what its side needs
(a worker planning a load pays the same): ``plan_case.py CASE SIDE TABLE LAST_APPEND``.
Prints the call's wall and CPU time and the process's peak RSS as JSON: ``VmHWM``, the peak
of this program's own memory (``ru_maxrss`` keeps the peak of the parent it was forked from
across ``exec``). A remote TABLE's storage options come as JSON in ``BENCH_STORAGE_OPTIONS``
(bench_plan_s3.py)."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def run_case(case: str, side: int, table: str, last_append: int) -> dict:
    """Plan in this (fresh) process; wall time of the call and the process's peak RSS."""
    options = json.loads(os.environ.get("BENCH_STORAGE_OPTIONS") or "null")
    if options:  # a snapshot on S3, either side
        if side == 0:
            from airflow_provider_delta.core import plan_snapshot
            action = lambda: len(plan_snapshot(table, storage_options=options))  # noqa: E731
        else:
            from deltalake import DeltaTable
            action = lambda: DeltaTable(  # noqa: E731
                table, storage_options=options).get_add_actions(flatten=True).num_rows
    elif case == "first":
        from airflow_provider_delta.core import plan_snapshot
        if side == 1:
            import pandas  # noqa: F401
        action = lambda: len(plan_snapshot(table))  # noqa: E731
    elif side == 0:
        from airflow_provider_delta.core import plan_changes, plan_snapshot
        action = ((lambda: len(plan_changes(table, 1, last_append))) if case == "changes"
                  else (lambda: len(plan_snapshot(table))))
    elif case != "changes":
        from deltalake import DeltaTable
        action = lambda: DeltaTable(table).get_add_actions(flatten=True).num_rows  # noqa: E731
    else:
        import pyarrow.json as pj
        log = Path(table) / "_delta_log"
        action = lambda: sum(pj.read_json(log / f"{v:020d}.json").num_rows  # noqa: E731
                             for v in range(1, last_append + 1))
    before = resource.getrusage(resource.RUSAGE_SELF)
    imports_mib = peak_rss_mib(before)
    started = time.perf_counter()
    count = action()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": seconds, "cpu_seconds": cpu, "rss_mib": peak_rss_mib(after),
            "import_mib": imports_mib, "count": count}


def peak_rss_mib(usage: resource.struct_rusage) -> float:
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return usage.ru_maxrss / 1024


if __name__ == "__main__":
    case, side, table, last_append = sys.argv[1:5]
    print(json.dumps(run_case(case, int(side), table, int(last_append))))
