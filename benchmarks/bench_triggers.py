"""Benchmark of N deferred DeltaVersionTriggers in one event loop, as Airflow's triggerer runs them.

Each trigger is driven the way ``TriggerRunner.run_trigger`` of the installed Airflow drives
it: a task per trigger (with a greenback portal), and -- when the trigger declares a
``shared_stream_key`` -- through Airflow's own ``SharedStreamManager`` and the trigger's
``filter_shared_stream``, else through ``run()``. Every trigger waits (``fire_once``, with the
``timeout_at`` a deferred sensor gives it by default,
``poll_interval`` 1 s unless the size says otherwise: ``30000@5`` is 30,000 triggers polling
every 5 s) for version 1 of a local table: N separate tables, or one shared table.
Once every trigger has made its first check, an idle window measures:

* idle CPU: the process's own CPU time (all threads) over the window, in cores;
* listings: calls of the log listing (``newest_version``) per second, and per table;
* INFO log lines per second;
* event-loop lag: a ticker sleeping 100 ms (the triggerer's watchdog period) records its
  oversleep, p99 and max, idle and while the events fire;
* the longest pause of the garbage collector while the events fire (it stops the loop too),
  and how many objects a full collection walks;
* RSS added by the triggers (VmRSS after the window minus before creating them), and the
  process's peak RSS (VmHWM, the interpreter and Airflow's imports included).

Then version 1 is committed to every table (a commit written by deltalake, kept aside and
renamed into ``_delta_log``, as a local commit appears), the tables' commits spread evenly over
one poll interval in a shuffled order so that they fall at every phase of the polls, whatever
order the polls follow; the detection time of each
trigger (event time minus its table's commit time) gives p50/p99, split into the poll's delay
(the commit to the first listing that saw it) and the hand-over (that listing to the event).
The commits come from a child process, as a writer's would.

``--gc-freeze`` calls ``gc.freeze()`` in each scenario's process after its imports, before the
triggers start: the import-time objects then leave the collector's walks. Airflow's triggerer
does not do this (its dag processor and LocalExecutor do); it is a deployment's choice, not the
provider's, and its rows say so.

Every scenario runs in its own process, on tables made for it (their logs hard-linked to one
template's) and deleted after it. ``--baseline-rev REV[,REV...]`` runs each scenario also on
the package as it was at each git revision REV (side by side, same machine state) and prints
ratios.

Run: ``.venv/bin/python benchmarks/bench_triggers.py [--sizes 30000@5,10000@1] [--layouts
separate,shared] [--idle 5] [--baseline-rev bb0d28a] [--profile] [--gc-freeze]`` (the default
sizes are issue #33's fleet: 30,000 triggers at a 5 s poll and 10,000 at 1 s, separate tables).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import json
import logging
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

LAG_TICK = 0.1
SENSOR_TIMEOUT = 7 * 24 * 3600  # a deferred sensor's timeout_at, from BaseSensorOperator's default
PENDING_COMMIT = "next-commit.json.pending"  # outside _delta_log until its moment comes


# -- tables ------------------------------------------------------------------------------

def template_table(workdir: Path) -> Path:
    """Version 0 written by deltalake; version 1 written too, then set aside for later."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = workdir / "template"
    if not (path / PENDING_COMMIT).exists():
        shutil.rmtree(path, ignore_errors=True)
        for rows in range(2):
            write_deltalake(str(path), pa.table({"id": pa.array([rows], pa.int64())}),
                            mode="append")
        os.rename(path / "_delta_log" / f"{1:020d}.json", path / PENDING_COMMIT)
    return path


def fresh_tables(workdir: Path, count: int) -> list[Path]:
    template = template_table(workdir)
    root = workdir / f"tables-{count}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return [linked_table(template, root / f"t{i:05d}") for i in range(count)]


def linked_table(template: Path, table: Path) -> Path:
    """The template's log (the triggers read nothing else), hard-linked: 30,000 tables are made
    in seconds and take no room. A commit is renamed into place, so no table changes another."""
    (table / "_delta_log").mkdir(parents=True)
    first = Path("_delta_log") / f"{0:020d}.json"
    os.link(template / first, table / first)
    os.link(template / PENDING_COMMIT, table / PENDING_COMMIT)
    return table


def commit_spread(listed: Path, poll_interval: float, record: Path) -> None:
    """Commit version 1 to each table ``listed`` (a line each), spread evenly over one poll
    interval (so the commits fall at every phase of the polls); writes the time of each commit
    by table, and how late the latest one came against its turn, to ``record``.

    Runs in another process, as a writer would. Both ways, only a file's name crosses: 30,000
    paths pickled to the process, or their times unpickled back, would start a full garbage
    collection in the benchmark's process among the events it measures.

    The tables take their turns in a shuffled order (the same in every run of a size): in the
    order they were made, a commit's phase would follow its trigger's start, and so its poll's
    phase wherever polls follow the order in which the triggers started.
    """
    committed = {}
    tables = [Path(line) for line in listed.read_text().splitlines()]
    random.Random(len(tables)).shuffle(tables)
    started = time.monotonic()
    behind = 0.0
    for index, table in enumerate(tables):
        due = started + index * poll_interval / len(tables)
        time.sleep(max(0.0, due - time.monotonic()))
        os.rename(table / PENDING_COMMIT, table / "_delta_log" / f"{1:020d}.json")
        committed[str(table)] = time.time()
        behind = max(behind, time.monotonic() - due)
    record.write_text(json.dumps({"committed": committed, "behind": behind}))


# -- measuring -----------------------------------------------------------------------------

def rss_bytes(field: str = "VmRSS") -> int:
    """The process's resident set (``VmHWM``: its peak) from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


class LagTicker:
    """Oversleep of a 100 ms sleep, the blocked-loop measure of the triggerer's watchdog.

    A window holds only the sleeps that began in it: the sleep under way at ``take()`` belongs
    to the window before (else a stall of the benchmark's own, such as ``gc.get_objects()``
    between two windows, would be counted in the next one).
    """

    def __init__(self):
        self.samples: list[float] = []
        self._since = 0.0

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            if started >= self._since:
                self.samples.append(time.monotonic() - started - LAG_TICK)

    def take(self) -> list[float]:
        taken, self.samples = self.samples, []
        self._since = time.monotonic()
        return taken


class GcPauses:
    """The garbage collector's pauses (it stops every thread, the loop's too), longest first."""

    def __init__(self):
        self.pauses: list[float] = []
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)

    def take(self) -> list[float]:
        taken, self.pauses = self.pauses, []
        return taken


class CountingHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = 0
        self.bytes = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1
        self.bytes += len(self.format(record))


def count_listings(found: dict[str, float]) -> dict[str, int]:
    """Count the log listings of every poll, per table (``newest_version`` as the probe calls it),
    and note in ``found`` when a listing first saw version 1 of each table."""
    from airflow_provider_delta.core import probe

    per_table: dict[str, int] = {}
    listing = probe.newest_version

    def counted(location, since=None):
        uri = location.table_uri
        per_table[uri] = per_table.get(uri, 0) + 1
        latest = listing(location, since)
        if latest >= 1 and uri not in found:
            found[uri] = time.time()
        return latest

    probe.newest_version = counted
    return per_table


# -- one scenario (its own process) --------------------------------------------------------

async def drive(trigger, streams, fired: dict[int, float], index: int) -> None:
    """What ``TriggerRunner.run_trigger`` does with a trigger's events, minus the bookkeeping."""
    import greenback

    await greenback.ensure_portal()
    key = trigger.shared_stream_key() if hasattr(trigger, "shared_stream_key") else None
    try:
        if key is not None:
            events = trigger.filter_shared_stream(streams.subscribe(trigger_id=index,
                                                                    trigger=trigger, key=key))
        else:
            events = trigger.run()
        async for event in events:
            assert event.payload["status"] == "success", event.payload
            fired[index] = time.time()
    finally:
        if key is not None:
            await streams.unsubscribe(index, key)


async def scenario(count: int, poll: float, layout: str, workdir: Path, idle: float,
                   profiler=None, freeze: bool = False) -> dict:
    from airflow.triggers.shared_stream import SharedStreamManager

    from airflow_provider_delta.triggers import DeltaVersionTrigger

    tables = fresh_tables(workdir, count if layout == "separate" else 1)
    if freeze:  # a deployment's setting (see the module's docstring), never the provider's
        gc.collect()
        gc.freeze()
    uris = [str(tables[i % len(tables)]) for i in range(count)]
    found: dict[str, float] = {}
    listings = count_listings(found)
    log_lines = CountingHandler()
    logging.getLogger().addHandler(log_lines)
    logging.getLogger().setLevel(logging.INFO)
    ticker = LagTicker()
    pauses = GcPauses()
    ticking = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(0.3)

    rss_before = rss_bytes()
    streams = SharedStreamManager()
    fired: dict[int, float] = {}
    started = time.monotonic()
    tasks = [asyncio.ensure_future(drive(
        DeltaVersionTrigger(table_uri=uri, start_version=1, poll_interval=poll, fire_once=True,
                            timeout_at=time.time() + SENSOR_TIMEOUT), streams, fired, i)) for i, uri in enumerate(uris)]
    # Every trigger made its first check: a table is polled only after its first trigger's.
    while (len(listings) < len(tables) or sum(listings.values()) < count) and (
            time.monotonic() - started < 120 + count / 100):
        await asyncio.sleep(0.1)
    first_checks_s = time.monotonic() - started
    # Commits come from another process, as a writer's would: a thread of this one would take
    # the interpreter's lock from the poll thread, which no writer does in a triggerer.
    listed, record = workdir / "tables.txt", workdir / "commits.json"
    listed.write_text("\n".join(map(str, tables)))
    committer = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"))
    await asyncio.get_running_loop().run_in_executor(committer, time.sleep, 0)  # started now
    await asyncio.sleep(2 * poll)
    assert not fired, "fired before the commit"

    if profiler is not None:  # the idle window and the firing, not the start
        profiler.enable()
    ticker.take()
    pauses.take()
    listed_before, lines_before = sum(listings.values()), log_lines.lines
    cpu_before, wall_before = time.process_time(), time.monotonic()
    await asyncio.sleep(idle)
    idle_cpu = (time.process_time() - cpu_before) / (time.monotonic() - wall_before)
    idle_wall = time.monotonic() - wall_before
    idle_lag = ticker.take()
    rss_added = rss_bytes() - rss_before
    idle_listings = (sum(listings.values()) - listed_before) / idle_wall
    idle_lines = (log_lines.lines - lines_before) / idle_wall
    objects = len(gc.get_objects())  # what a full collection walks (a stall: not measured)
    ticker.take()
    pauses.take()

    await asyncio.sleep(random.random() * poll)  # a shared table: any phase
    await asyncio.get_running_loop().run_in_executor(committer, commit_spread, listed, poll,
                                                     record)
    deadline = time.monotonic() + 60 + 4 * poll
    while len(fired) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    firing_lag = ticker.take()
    committer.shutdown()
    commits = json.loads(record.read_text())
    committed, commits_behind = commits["committed"], commits["behind"]
    firing_pauses = pauses.take()
    if profiler is not None:
        profiler.disable()
    detections = [fired[i] - committed[uri] for i, uri in enumerate(uris) if i in fired]
    # A detection is the poll's delay (commit to the listing that saw it) plus the hand-over
    # (that listing to the trigger's event: the head commit's read, the batch, the loop).
    poll_delays = [found[uri] - committed[uri] for uri in committed if uri in found]
    hand_overs = [fired[i] - found[uri] for i, uri in enumerate(uris)
                  if i in fired and uri in found]
    for task in tasks:
        task.cancel()
    ticking.cancel()
    await asyncio.gather(*tasks, ticking, return_exceptions=True)
    return {
        "count": count, "poll": poll, "layout": layout, "fired": len(fired),
        "first_checks_s": first_checks_s,
        "detect_p50": percentile(detections, 0.5), "detect_p99": percentile(detections, 0.99),
        "poll_delay_p99": percentile(poll_delays, 0.99), "poll_delay_max": max(poll_delays),
        "hand_over_p99": percentile(hand_overs, 0.99), "hand_over_max": max(hand_overs),
        "commits_behind_max": commits_behind,
        "idle_cpu": idle_cpu, "idle_listings_per_s": idle_listings,
        "listings_per_table_per_s": idle_listings / len(tables),
        "idle_info_lines_per_s": idle_lines,
        "lag_idle_p99": percentile(idle_lag, 0.99), "lag_idle_max": max(idle_lag, default=0.0),
        "lag_firing_max": max(firing_lag, default=0.0),
        "gc_firing_max": max(firing_pauses, default=0.0), "gc_objects": objects,
        "gc_frozen": gc.get_freeze_count(),
        "rss_added_mib": rss_added / 2**20, "rss_peak_mib": rss_bytes("VmHWM") / 2**20,
    }


# -- the runs ------------------------------------------------------------------------------

def package_at(revision: str, into: Path) -> Path:
    """The package as it was at ``revision`` (git archive), for side-by-side runs."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", revision, "airflow_provider_delta"],
                             check=True, capture_output=True).stdout
    target = into / f"package-{revision}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def run_scenario(size: str, layout: str, workdir: Path, idle: float,
                 package_root: Path | None, profile: bool, freeze: bool = False) -> dict:
    env = dict(os.environ)
    # This checkout's package, not whichever one the venv has installed.
    package_root = package_root or Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_root), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--scenario", f"{size},{layout}", "--workdir", str(workdir),
         "--idle", str(idle), *(["--profile"] if profile else []),
         *(["--gc-freeze"] if freeze else [])],
        env=env, capture_output=True, text=True)
    if profile or done.returncode:
        print(done.stderr)
    done.check_returncode()
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_size(size: str) -> tuple[int, float]:
    """``30000@5``: 30,000 triggers polling every 5 s; a bare count polls every second."""
    count, _, poll = size.partition("@")
    return int(count), float(poll or 1.0)


def run_profiled(count: int, poll: float, layout: str, workdir: Path, idle: float,
                 freeze: bool) -> dict:
    """The scenario under cProfile (the event loop's thread only): where the loop's time goes."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    result = asyncio.run(scenario(count, poll, layout, workdir, idle, profiler, freeze))
    profiler.dump_stats(workdir / f"profile-{count}@{poll:g}-{layout}.pstats")
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return result


def print_row(label: str, result: dict) -> None:
    print(f"  {label:<9} N={result['count']:>5} poll {result['poll']:g} s {result['layout']:<8} "
          f"fired {result['fired']:>5} | detect p50 {result['detect_p50']:.2f} s "
          f"p99 {result['detect_p99']:.2f} s (poll delay p99 {result['poll_delay_p99']:.2f} "
          f"max {result['poll_delay_max']:.2f}, hand-over p99 "
          f"{result['hand_over_p99']:.2f} max {result['hand_over_max']:.2f}, "
          f"commits up to {result['commits_behind_max']:.2f} s late) | "
          f"idle CPU {result['idle_cpu']:.3f} cores | "
          f"listings {result['idle_listings_per_s']:.0f}/s "
          f"({result['listings_per_table_per_s']:.2f}/table/s) | "
          f"INFO {result['idle_info_lines_per_s']:.0f} lines/s | "
          f"loop lag idle p99 {result['lag_idle_p99'] * 1e3:.0f} ms "
          f"max {result['lag_idle_max'] * 1e3:.0f} ms, firing max "
          f"{result['lag_firing_max'] * 1e3:.0f} ms (longest GC pause "
          f"{result['gc_firing_max'] * 1e3:.0f} ms, {result['gc_objects'] / 1e6:.2f}M objects"
          f"{frozen_note(result)}) | "
          f"RSS +{result['rss_added_mib']:.1f} MiB, "
          f"peak {result['rss_peak_mib']:.0f} MiB | "
          f"first checks {result['first_checks_s']:.1f} s")


def frozen_note(result: dict) -> str:
    """The rows of a ``--gc-freeze`` run say so: a deployment's setting, not the provider's."""
    frozen = result.get("gc_frozen", 0)
    return f", {frozen / 1e6:.2f}M frozen by gc.freeze(), a deployment setting" if frozen else ""


def print_ratios(ours: dict, theirs: dict) -> None:
    """This tree against the baseline: below 1 is better."""
    def ratio(key: str) -> str:
        return f"{ours[key] / theirs[key]:.2f}" if theirs[key] else "n/a"

    print(f"  {'ratio':<9} detect p99 {ratio('detect_p99')} | idle CPU {ratio('idle_cpu')} | "
          f"loop lag idle max {ratio('lag_idle_max')}, firing max {ratio('lag_firing_max')} | "
          f"peak RSS {ratio('rss_peak_mib')} | first checks {ratio('first_checks_s')}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="30000@5,10000@1",
                        help="trigger counts, each with @poll seconds if not 1: 3000,30000@5")
    parser.add_argument("--layouts", default="separate", help="separate,shared")
    parser.add_argument("--profile", action="store_true",
                        help="print where the event loop's time goes (cProfile) in each run")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle window")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "trigger-bench"))
    parser.add_argument("--baseline-rev", default="",
                        help="also run each scenario on the package at these git revisions "
                             "(comma-separated)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after the imports in each scenario's process (a "
                             "deployment's setting: Airflow's triggerer does not do it)")
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    if args.scenario:
        size, layout = args.scenario.split(",")
        logging.getLogger("airflow").setLevel(logging.INFO)
        try:
            if args.profile:
                result = run_profiled(*parse_size(size), layout, workdir, args.idle,
                                      args.gc_freeze)
            else:
                result = asyncio.run(scenario(*parse_size(size), layout, workdir, args.idle,
                                              freeze=args.gc_freeze))
        finally:
            for tables in workdir.glob("tables-*"):
                shutil.rmtree(tables, ignore_errors=True)
        print(json.dumps(result))
        return

    workdir.mkdir(parents=True, exist_ok=True)
    baselines = {rev: package_at(rev, workdir) for rev in args.baseline_rev.split(",") if rev}
    print(f"DeltaVersionTrigger x N in one event loop, idle window {args.idle:g} s; "
          f"load average before: {os.getloadavg()}", flush=True)
    if args.gc_freeze:
        print("gc.freeze() after the imports in every scenario: a deployment's setting, which "
              "Airflow's triggerer does not make, and not the provider's", flush=True)
    for size in args.sizes.split(","):
        for layout in args.layouts.split(","):
            ours = run_scenario(size, layout, workdir / "ours", args.idle, None, args.profile,
                                args.gc_freeze)
            print_row("this tree", ours)
            sys.stdout.flush()
            for rev, baseline in baselines.items():
                theirs = run_scenario(size, layout, workdir / "base", args.idle, baseline,
                                      args.profile, args.gc_freeze)
                print_row(rev[:9], theirs)
                print_ratios(ours, theirs)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
